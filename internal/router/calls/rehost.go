package calls

import (
	"context"
	"strconv"

	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/internal/router/rehost"
)

// Rehoster copies the results of a successful answer into the gateway's
// storage and rewrites the answer to point at the copies (rehost.Copier).
type Rehoster interface {
	Rewrite(ctx context.Context, rule *rehost.Rule, t rehost.Target, body []byte) rehost.Outcome
}

// rehost copies out's results when the model has a rehost rule and the
// answer is a success, replacing out's body with the rewritten one before
// it is recorded (so that a replay answers the same URLs and creates
// nothing). It returns how many results could not be copied; those keep
// the partner's value. It runs detached from the client: the copies belong
// to the recorded answer, whoever reads it.
func (s *Service) rehost(ctx context.Context, req Request, out *provider.Outcome) (failed int) {
	m := req.Model
	if s.cfg.Rehost == nil || m.Rehost == nil || out == nil || out.Status < 200 || out.Status > 299 {
		return 0
	}
	o := s.cfg.Rehost.Rewrite(context.WithoutCancel(ctx), m.Rehost,
		rehost.Target{Account: req.Workspace, RequestID: req.RequestID, ContentBase: req.ContentBase}, out.Body)
	out.Body = o.Body
	return o.Failed
}

// setRehostFailed tells the caller how many results kept the partner's value.
func setRehostFailed(r *Response, failed int) {
	if failed > 0 {
		r.header().Set(rehost.HeaderFailed, strconv.Itoa(failed))
	}
}
