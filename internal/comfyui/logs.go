package comfyui

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/jobs"
)

// Run logs come from ComfyUI's own log API (server.py's /internal routes
// over app/logger.py): ComfyUI keeps what it writes to stdout and stderr as
// entries {t: local ISO time, m: the text written}, serves the latest ones
// at GET /internal/logs (one string) and GET /internal/logs/raw
// ({entries, size}), and, once a WebSocket session has subscribed with
// PATCH /internal/logs/subscribe {"clientId", "enabled": true}, sends that
// session a "logs" message {entries, size} each time the streams flush. A
// session that disconnects loses its subscription.
//
// A pool subscribes its worker sessions once some job wants a run log (a
// job of a serverless deployment), and again after every reconnect. An
// attempt then receives every entry the worker flushes while the attempt
// is registered there (from just before its /prompt until its end), plus
// the "Prompt executed in" timing line ComfyUI prints just after the
// prompt's final executing event. When several jobs share a worker their
// windows overlap, and each one's log holds the lines printed during its
// window, whoever printed them; lines printed while the socket was down are
// not captured.

// timingLinePrefix starts the line ComfyUI prints after every prompt.
const timingLinePrefix = "Prompt executed in"

// timingLineWait bounds how long an attempt that ended waits for its
// timing line.
var timingLineWait = 2 * time.Second

// logEntry is one entry of ComfyUI's log buffer.
type logEntry struct {
	T string `json:"t"`
	M string `json:"m"`
}

// logCapture is an attempt's side of the log stream.
type logCapture struct {
	log    *jobs.RunLog
	once   sync.Once
	timing chan struct{} // closed when the prompt's timing line arrived
}

func newLogCapture(l *jobs.RunLog) *logCapture {
	if l == nil {
		return nil
	}
	return &logCapture{log: l, timing: make(chan struct{})}
}

func (c *logCapture) sawTiming() { c.once.Do(func() { close(c.timing) }) }

// wantLogs asks for the worker's log stream from now on: it subscribes
// the session at once and after every reconnect (connectLoop).
func (w *worker) wantLogs(ctx context.Context) {
	if w.logsWanted.Swap(true) {
		return
	}
	w.subscribeLogs(ctx)
}

// subscribeLogs subscribes the worker's session to "logs" messages. A
// worker without the route (an old ComfyUI) simply yields no run logs.
func (w *worker) subscribeLogs(ctx context.Context) {
	_, err := w.patchJSON(ctx, "/internal/logs/subscribe", map[string]any{"clientId": w.clientID, "enabled": true})
	if err != nil && ctx.Err() == nil {
		w.log.Debug("subscribing to the worker's logs", zap.Error(err))
	}
}

// routeLogs hands a "logs" message's entries to every attempt capturing on
// this worker, and the timing line to the attempt whose prompt ended last.
func (w *worker) routeLogs(data json.RawMessage) {
	var msg struct {
		Entries []logEntry `json:"entries"`
	}
	if json.Unmarshal(data, &msg) != nil || len(msg.Entries) == 0 {
		return
	}
	w.mu.Lock()
	var targets []*logCapture
	for _, a := range w.attempts {
		if a.logs != nil {
			targets = append(targets, a.logs)
		}
	}
	var ended *logCapture
	if a := w.attempts[w.lastEnded]; a != nil {
		ended = a.logs
	}
	w.mu.Unlock()
	for _, e := range msg.Entries {
		for _, c := range targets {
			_, _ = c.log.Write([]byte(e.M))
		}
		if ended != nil && strings.HasPrefix(strings.TrimLeft(e.M, "\r\n "), timingLinePrefix) {
			ended.sawTiming()
		}
	}
}

// awaitTimingLine keeps an attempt whose prompt ran registered until
// ComfyUI printed its timing line, for at most timingLineWait.
func (a *attempt) awaitTimingLine() {
	t := time.NewTimer(timingLineWait)
	defer t.Stop()
	select {
	case <-a.logs.timing:
	case <-t.C:
	case <-a.p.ctx.Done():
	}
}

func (w *worker) patchJSON(ctx context.Context, route string, body any) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return w.call(ctx, http.MethodPatch, route, nil, strings.NewReader(string(data)), "application/json")
}
