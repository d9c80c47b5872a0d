package comfyconsole

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// serveAPI routes GET api/… (parts is the path after api/).
func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request, parts []string) error {
	switch {
	case len(parts) == 1 && parts[0] == "overview":
		return h.overview(w, r)
	case len(parts) == 1 && parts[0] == "jobs":
		return h.jobList(w, r)
	case len(parts) == 3 && parts[0] == "jobs":
		return h.jobDetail(w, r, parts[1], parts[2])
	case len(parts) == 4 && parts[0] == "assets" && parts[3] == "content":
		return h.assetContent(w, r, parts[1], parts[2])
	}
	return apierr.NotFound("no such console route")
}

// poolJSON is one pool in the overview.
type poolJSON struct {
	Name     string                `json:"name"`
	Kind     string                `json:"kind"`
	Capacity int                   `json:"capacity"`
	Queued   int64                 `json:"queued"`
	Running  int64                 `json:"running"`
	Workers  []comfyui.WorkerState `json:"workers"`
}

// overview is the pools with their queues and workers, and the last hour
// of uploads and router calls in this process.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) error {
	counts, err := h.app.Store().CountJobs(r.Context())
	if err != nil {
		return apierr.Upstream(err)
	}
	var pools []poolJSON
	for _, p := range h.app.PoolStates() {
		c := counts[p.Name]
		workers := p.Workers
		if workers == nil {
			workers = []comfyui.WorkerState{}
		}
		pools = append(pools, poolJSON{Name: p.Name, Kind: p.Kind, Capacity: p.Capacity,
			Queued: c.Queued, Running: c.Running, Workers: workers})
	}
	now := time.Now()
	usage, since := metrics.LastHour.Since(now)
	return httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"time":  httpx.Time(now),
		"pools": pools,
		"last_hour": map[string]any{
			"since": httpx.Time(since),
			"usage": usage,
		},
	})
}

// jobJSON is a job as the console lists it.
type jobJSON struct {
	ID          string          `json:"id"`
	Account     string          `json:"account"`
	Pool        string          `json:"pool"`
	Status      string          `json:"status"`
	CreatedAt   string          `json:"created_at"`
	StartedAt   *string         `json:"started_at"`
	CompletedAt *string         `json:"completed_at"`
	Progress    json.RawMessage `json:"progress"`
	Error       json.RawMessage `json:"error"`
	Outputs     []outputJSON    `json:"outputs"`
}

type outputJSON struct {
	NodeID      string `json:"node_id"`
	Name        string `json:"name"`
	Type        string `json:"type"`
	ContentType string `json:"content_type"`
	SizeBytes   int64  `json:"size_bytes"`
	// Content is the console route of the bytes, relative to the page.
	Content string `json:"content"`
}

func jobView(j storage.Job) jobJSON {
	v := jobJSON{ID: j.ID, Account: j.AccountID, Pool: j.Pool, Status: j.Status,
		CreatedAt: httpx.Time(j.CreatedAt), StartedAt: httpx.TimePtr(j.StartedAt), CompletedAt: httpx.TimePtr(j.CompletedAt),
		Progress: orNull(j.Progress), Error: orNull(j.Error), Outputs: make([]outputJSON, 0, len(j.Outputs))}
	for _, o := range j.Outputs {
		v.Outputs = append(v.Outputs, outputJSON{NodeID: o.NodeID, Name: o.Name, Type: o.Type,
			ContentType: o.Asset.ContentType, SizeBytes: o.Asset.SizeBytes,
			Content: "api/assets/" + url.PathEscape(j.AccountID) + "/" + o.Asset.ID + "/content"})
	}
	return v
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// jobList is a page of every account's jobs, newest first, filtered by
// the v2 list's parameters (status, limit, cursor).
func (h *Handler) jobList(w http.ResponseWriter, r *http.Request) error {
	q, err := jobs.ParseListQuery(r.URL.RawQuery)
	if err != nil {
		return err
	}
	page, next, err := h.app.Jobs(h.app.DefaultPool()).ListEveryAccount(r.Context(), q)
	if err != nil {
		return err
	}
	views := make([]jobJSON, 0, len(page))
	for _, j := range page {
		views = append(views, jobView(j))
	}
	body := map[string]any{"jobs": views}
	if next != "" {
		body["next_cursor"] = next
	}
	return httpx.WriteJSON(w, http.StatusOK, body)
}

// nodeJSON is one node of a job's workflow.
type nodeJSON struct {
	ID        string          `json:"id"`
	ClassType string          `json:"class_type"`
	Inputs    json.RawMessage `json:"inputs"`
}

// jobDetail is one job with its workflow's nodes.
func (h *Handler) jobDetail(w http.ResponseWriter, r *http.Request, account, id string) error {
	account, err := url.PathUnescape(account)
	if err != nil {
		return apierr.NotFound("job not found")
	}
	j, err := h.app.Jobs(h.app.DefaultPool()).Get(r.Context(), account, id)
	if err != nil {
		return err
	}
	nodes := []nodeJSON{}
	if g, err := workflow.DecodeGraph(j.Workflow); err == nil {
		for nid, n := range g {
			inputs, _ := json.Marshal(n.Inputs)
			nodes = append(nodes, nodeJSON{ID: nid, ClassType: n.ClassType, Inputs: inputs})
		}
		sort.Slice(nodes, func(a, b int) bool { return nodeOrder(nodes[a].ID, nodes[b].ID) })
	}
	body := map[string]any{"job": jobView(j), "nodes": nodes}
	// The operator sees a run log wherever one was captured (serverless
	// deployments, the public demo's included), once the job has ended.
	if storage.Terminal(j.Status) {
		l, ok, err := h.app.Store().GetJobLog(r.Context(), account, j.ID)
		if err != nil {
			return apierr.Upstream(err)
		}
		if ok {
			body["log"] = map[string]any{"text": l.Text, "truncated": l.Truncated, "captured_at": httpx.Time(l.CapturedAt)}
		}
	}
	return httpx.WriteJSON(w, http.StatusOK, body)
}

// nodeOrder sorts node ids numerically when both are numbers, else as text.
func nodeOrder(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x < y
	}
	return strings.Compare(a, b) < 0
}

// assetContent serves an asset's bytes (an output's thumbnail).
func (h *Handler) assetContent(w http.ResponseWriter, r *http.Request, account, id string) error {
	account, err := url.PathUnescape(account)
	if err != nil {
		return apierr.NotFound("asset not found")
	}
	a, f, err := h.app.Assets().Open(r.Context(), account, id)
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", a.ContentType)
	httpx.UntrustedContent(w.Header())
	return httpx.ServeContent(w, r, a.CreatedAt, f)
}
