package nativeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// Bounds of the lists this front reads: ComfyUI keeps at most 10000
// prompts of history; a queue or history answer lists at most
// maxListed, and a history read scans at most maxScanned jobs to fill it.
const (
	maxListed  = 1000
	maxScanned = 10000
	// DefaultHistoryItems is how many prompts /history lists without max_items.
	DefaultHistoryItems = 100
)

// Service answers the ComfyUI protocol for one pool.
type Service struct {
	Jobs   *jobs.Service
	Assets *assets.Service
	Native storage.NativeStore
	// ObjectInfo returns the pool's catalog as /object_info answers it.
	ObjectInfo func(ctx context.Context) (map[string]json.RawMessage, error)
	Logger     *zap.Logger
}

// sessions are this process's running sessions by ClientTopic, whichever
// handler (and Service value: one is made per request) serves them.
var sessions = struct {
	sync.Mutex
	m map[string]map[*Session]struct{}
}{m: map[string]map[*Session]struct{}{}}

// register lists a running session, so that QueuePrompt can hand it the
// prompts of its client id before they start.
func (s *Service) register(sess *Session) {
	key := ClientTopic(sess.Account, sess.ClientID)
	sessions.Lock()
	defer sessions.Unlock()
	if sessions.m[key] == nil {
		sessions.m[key] = map[*Session]struct{}{}
	}
	sessions.m[key][sess] = struct{}{}
}

func (s *Service) unregister(sess *Session) {
	key := ClientTopic(sess.Account, sess.ClientID)
	sessions.Lock()
	defer sessions.Unlock()
	delete(sessions.m[key], sess)
	if len(sessions.m[key]) == 0 {
		delete(sessions.m, key)
	}
}

// hold has this process's sessions of the client id follow jobID from
// before it is queued (see Session.hold); sessions in other processes
// start on the announcement, and catch up on the nodes the prompt ran
// before it from the job's stored progress (see Follower.progress). The returned func releases them (true) or
// drops them (false: the prompt was not queued).
func (s *Service) hold(account, clientID, jobID string) func(ok bool) {
	sessions.Lock()
	var held []*Session
	for sess := range sessions.m[ClientTopic(account, clientID)] {
		held = append(held, sess)
	}
	sessions.Unlock()
	releases := make([]func(bool), 0, len(held))
	for _, sess := range held {
		releases = append(releases, sess.hold(jobID))
	}
	return func(ok bool) {
		for _, r := range releases {
			r(ok)
		}
	}
}

// ClientTopic is the bus key on which new prompts of one account's
// WebSocket session are announced, so that a socket held by any gateway
// process starts following them at once.
func ClientTopic(account, clientID string) string {
	return "\x00native-client\x00" + account + "\x00" + clientID
}

// promptAnnouncement is the bus event data of a new prompt.
type promptAnnouncement struct {
	PromptID string `json:"prompt_id"`
}

// promptBody is POST /prompt's body; members comfygate does not use are
// ignored, as ComfyUI ignores unknown ones.
type promptBody struct {
	Prompt                  json.RawMessage            `json:"prompt"`
	ClientID                string                     `json:"client_id"`
	PromptID                *string                    `json:"prompt_id"`
	ExtraData               map[string]json.RawMessage `json:"extra_data"`
	PartialExecutionTargets []string                   `json:"partial_execution_targets"`
}

// Queued is an accepted prompt.
type Queued struct {
	PromptID string `json:"prompt_id"`
	Number   int64  `json:"number"`
	// NodeErrors is always empty: comfygate refuses a prompt any of whose
	// outputs fails validation instead of running the others.
	NodeErrors map[string]any `json:"node_errors"`

	announce func(context.Context)
}

// Announce tells the sockets of the prompt's client_id (in every gateway
// process) to follow it. Call it once the answer to POST /prompt is out,
// so that a client reads its prompt_id before the prompt's first message,
// as ComfyUI's clients expect.
func (q Queued) Announce(ctx context.Context) {
	if q.announce != nil {
		q.announce(ctx)
	}
}

// decodePrompt reads a POST /prompt body: the prompt's id (the client's,
// or a fresh one) and the v2 submit body it becomes. Its refusals are
// ComfyUI's 400 shape.
func decodePrompt(body []byte) (in promptBody, id string, v2Body []byte, rej *Rejection) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil || bytes.TrimSpace(body)[0] != '{' {
		return in, "", nil, InvalidPrompt("invalid_prompt", "the body must be a JSON object", "")
	}
	if len(bytes.TrimSpace(in.Prompt)) == 0 || bytes.Equal(bytes.TrimSpace(in.Prompt), []byte("null")) {
		return in, "", nil, InvalidPrompt("no_prompt", "No prompt provided", "No prompt provided")
	}
	if len(in.PartialExecutionTargets) > 0 {
		return in, "", nil, InvalidPrompt("invalid_prompt", "partial_execution_targets is not supported: every output of the prompt runs", "")
	}
	id = storage.NewID()
	if in.PromptID != nil && *in.PromptID != "" {
		parsed, err := uuid.Parse(*in.PromptID)
		if err != nil || parsed.String() != *in.PromptID {
			return in, "", nil, InvalidPrompt("invalid_prompt", "prompt_id must be a UUID in lowercase canonical form", *in.PromptID)
		}
		id = *in.PromptID
	}
	v2 := map[string]any{"workflow": in.Prompt}
	if raw, ok := in.ExtraData["api_key_comfy_org"]; ok {
		v2["extra_data"] = map[string]json.RawMessage{"api_key_comfy_org": raw}
	}
	v2Body, err := json.Marshal(v2)
	if err != nil {
		return in, "", nil, InvalidPrompt("invalid_prompt", "the prompt is not valid JSON", "")
	}
	return in, id, v2Body, nil
}

// QueuePrompt validates a POST /prompt body and queues it as a v2 job of
// account. A refusal the client caused is a *Rejection (ComfyUI's 400
// shape); anything else is an *apierr.Error or an internal error.
func (s *Service) QueuePrompt(ctx context.Context, account string, body []byte) (Queued, error) {
	in, id, v2Body, rej := decodePrompt(body)
	if rej != nil {
		return Queued{}, rej
	}
	release := func(bool) {}
	if in.ClientID != "" {
		release = s.hold(account, in.ClientID, id)
	}
	job, err := s.Jobs.SubmitWithID(ctx, account, id, v2Body)
	if err != nil {
		release(false)
	}
	if errors.Is(err, jobs.ErrJobIDTaken) {
		return Queued{}, InvalidPrompt("invalid_prompt", "prompt_id names an existing prompt; send a fresh UUID or none", id)
	}
	if err != nil {
		g, _ := workflow.DecodeGraph(in.Prompt)
		cat, _ := s.Jobs.Catalog(ctx) // only names dependent outputs; a refusal stands without it
		if r, ok := Reject(err, g, cat); ok {
			return Queued{}, r
		}
		return Queued{}, err
	}
	q := Queued{PromptID: job.ID, Number: Number(job), NodeErrors: map[string]any{}}
	if in.ClientID != "" {
		s.remember(context.WithoutCancel(ctx), account, job.ID, in.ClientID)
		q.announce = func(ctx context.Context) {
			release(true)
			data, _ := json.Marshal(promptAnnouncement{PromptID: job.ID})
			_ = s.Jobs.Bus.Publish(ctx, bus.Event{JobID: ClientTopic(account, in.ClientID), Kind: "native_prompt", Data: data})
		}
	}
	return q, nil
}

// remember records the prompt's WebSocket session. The job is durable
// already: a failure here only costs a socket that connects later the
// prompt's events (the announcement still reaches the sockets open now),
// so it is logged, not returned.
func (s *Service) remember(ctx context.Context, account, jobID, clientID string) {
	err := s.Native.CreateNativePrompt(ctx, storage.NativePrompt{JobID: jobID, AccountID: account, ClientID: clientID})
	if err != nil && s.Logger != nil {
		s.Logger.Error("recording a prompt's client_id", zap.String("job_id", jobID), zap.Error(err))
	}
}

// activeStatuses are the statuses of ComfyUI's queue: pending (queued) and
// running (running, canceling).
var activeStatuses = []string{storage.JobQueued, storage.JobRunning, storage.JobCanceling}

// listJobs pages through the account's jobs with statuses, newest first,
// calling keep for each until it returns false or maxScanned were read.
func (s *Service) listJobs(ctx context.Context, account string, statuses []string, keep func(storage.Job) (bool, error)) error {
	q := storage.JobQuery{Statuses: statuses, Limit: 100}
	for scanned := 0; scanned < maxScanned; {
		page, next, err := s.Jobs.List(ctx, account, q)
		if err != nil {
			return err
		}
		for _, j := range page {
			more, err := keep(j)
			if err != nil || !more {
				return err
			}
		}
		scanned += len(page)
		if next == "" || len(page) == 0 {
			return nil
		}
		last := page[len(page)-1]
		q.Before = &storage.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return nil
}

// QueueRemaining is the account's queued and running prompts (counted up
// to maxListed).
func (s *Service) QueueRemaining(ctx context.Context, account string) (int, error) {
	n := 0
	err := s.listJobs(ctx, account, activeStatuses, func(storage.Job) (bool, error) {
		n++
		return n < maxListed, nil
	})
	return n, err
}

// Queue is ComfyUI's /queue for account: its running and pending prompts,
// each list oldest first.
func (s *Service) Queue(ctx context.Context, account string) (running, pending []QueueItem, err error) {
	var list []storage.Job
	err = s.listJobs(ctx, account, activeStatuses, func(j storage.Job) (bool, error) {
		list = append(list, j)
		return len(list) < maxListed, nil
	})
	if err != nil {
		return nil, nil, err
	}
	clients, err := s.clientIDs(ctx, account, list)
	if err != nil {
		return nil, nil, err
	}
	slices.Reverse(list)
	cat := s.catalog(ctx)
	running, pending = []QueueItem{}, []QueueItem{}
	for _, j := range list {
		item := QueueItemOf(j, clients[j.ID], cat)
		if j.Status == storage.JobQueued {
			pending = append(pending, item)
		} else {
			running = append(running, item)
		}
	}
	return running, pending, nil
}

// catalog is the pool's node catalog, or nil when it cannot be read now
// (the lists then name what they can without it).
func (s *Service) catalog(ctx context.Context) workflow.Catalog {
	cat, err := s.Jobs.Catalog(ctx)
	if err != nil {
		return nil
	}
	return cat
}

// clientIDs maps jobs to the client_id they were submitted with.
func (s *Service) clientIDs(ctx context.Context, account string, list []storage.Job) (map[string]string, error) {
	ids := make([]string, len(list))
	for i, j := range list {
		ids[i] = j.ID
	}
	out := map[string]string{}
	for chunk := range slices.Chunk(ids, storage.MaxNativeIDs) {
		recs, err := s.Native.NativePrompts(ctx, account, chunk)
		if err != nil {
			return nil, apierr.Upstream(err)
		}
		for id, r := range recs {
			out[id] = r.ClientID
		}
	}
	return out, nil
}

// History is ComfyUI's /history for account: its finished prompts not
// hidden from this view, the newest maxItems after skipping the newest
// offset, listed oldest first as ComfyUI lists them.
func (s *Service) History(ctx context.Context, account string, maxItems, offset int) (History, error) {
	if maxItems <= 0 || maxItems > maxListed {
		maxItems = min(max(maxItems, DefaultHistoryItems), maxListed)
	}
	var picked []storage.Job
	var page []storage.Job
	flush := func() error {
		visible, err := s.visible(ctx, account, page)
		page = page[:0]
		for _, j := range visible {
			if offset > 0 {
				offset--
				continue
			}
			if len(picked) < maxItems {
				picked = append(picked, j)
			}
		}
		return err
	}
	err := s.listJobs(ctx, account, historyStatuses, func(j storage.Job) (bool, error) {
		page = append(page, j)
		if len(page) < 100 {
			return true, nil
		}
		err := flush()
		return len(picked) < maxItems, err
	})
	if err == nil && len(page) > 0 {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	return s.entries(ctx, account, picked)
}

// historyStatuses are the statuses InHistory admits.
var historyStatuses = []string{storage.JobSucceeded, storage.JobFailed, storage.JobCanceled}

// visible drops the jobs the account hid from its history.
func (s *Service) visible(ctx context.Context, account string, list []storage.Job) ([]storage.Job, error) {
	ids := make([]string, len(list))
	for i, j := range list {
		ids[i] = j.ID
	}
	hidden, clearedAt, err := s.Native.HistoryHidden(ctx, account, ids)
	if err != nil {
		return nil, apierr.Upstream(err)
	}
	var out []storage.Job
	for _, j := range list {
		if hidden[j.ID] || (!clearedAt.IsZero() && j.CompletedAt != nil && !j.CompletedAt.After(clearedAt)) {
			continue
		}
		out = append(out, j)
	}
	return out, nil
}

// entries renders jobs (listed newest first, with their outputs) as the
// history, oldest first.
func (s *Service) entries(ctx context.Context, account string, list []storage.Job) (History, error) {
	clients, err := s.clientIDs(ctx, account, list)
	if err != nil {
		return nil, err
	}
	cat := s.catalog(ctx)
	h := make(History, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		j := list[i]
		h = append(h, HistoryItem{ID: j.ID, Entry: HistoryOf(j, clients[j.ID], cat)})
	}
	return h, nil
}

// HistoryOne is /history/{id}: the prompt's entry once it finished, or an
// empty history (unknown, not the caller's, unfinished or hidden).
func (s *Service) HistoryOne(ctx context.Context, account, id string) (History, error) {
	j, err := s.Jobs.Get(ctx, account, id)
	if e, ok := apierr.As(err); ok && e.Status == 404 {
		return History{}, nil
	}
	if err != nil {
		return nil, err
	}
	if !InHistory(j) {
		return History{}, nil
	}
	visible, err := s.visible(ctx, account, []storage.Job{j})
	if err != nil || len(visible) == 0 {
		return History{}, err
	}
	return s.entries(ctx, account, visible)
}

// HideHistory is POST /history {"delete": ids}: the prompts leave this
// view; the jobs keep their retention.
func (s *Service) HideHistory(ctx context.Context, account string, ids []string) error {
	for chunk := range slices.Chunk(ids, storage.MaxNativeIDs) {
		if err := s.Native.HideFromHistory(ctx, account, chunk); err != nil {
			return apierr.Upstream(err)
		}
	}
	return nil
}

// ClearHistory is POST /history {"clear": true}: every prompt finished so
// far leaves this view.
func (s *Service) ClearHistory(ctx context.Context, account string) error {
	if err := s.Native.ClearHistory(ctx, account, time.Now()); err != nil {
		return apierr.Upstream(err)
	}
	return nil
}

// Interrupt is POST /interrupt: the prompt named (when it runs) or every
// running prompt of the account is canceled, as v2's cancel does.
func (s *Service) Interrupt(ctx context.Context, account, promptID string) error {
	if promptID != "" {
		j, err := s.Jobs.Get(ctx, account, promptID)
		if e, ok := apierr.As(err); ok && e.Status == 404 {
			return nil
		}
		if err != nil || j.Status != storage.JobRunning {
			return err
		}
		_, err = s.Jobs.Cancel(ctx, account, j.ID)
		return err
	}
	return s.cancelAll(ctx, account, storage.JobRunning)
}

// DeleteQueued is POST /queue {"delete": ids}: the named prompts that are
// still pending are canceled; running ones are left alone, as ComfyUI does.
func (s *Service) DeleteQueued(ctx context.Context, account string, ids []string) error {
	for _, id := range ids {
		j, err := s.Jobs.Get(ctx, account, id)
		if e, ok := apierr.As(err); ok && e.Status == 404 {
			continue
		}
		if err != nil {
			return err
		}
		if j.Status == storage.JobQueued {
			if _, err := s.Jobs.Cancel(ctx, account, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClearQueue is POST /queue {"clear": true}: every pending prompt of the
// account is canceled.
func (s *Service) ClearQueue(ctx context.Context, account string) error {
	return s.cancelAll(ctx, account, storage.JobQueued)
}

func (s *Service) cancelAll(ctx context.Context, account, status string) error {
	var ids []string
	err := s.listJobs(ctx, account, []string{status}, func(j storage.Job) (bool, error) {
		ids = append(ids, j.ID)
		return len(ids) < maxListed, nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := s.Jobs.Cancel(ctx, account, id); err != nil {
			return err
		}
	}
	return nil
}
