package comfyuipeer

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// The log API of ComfyUI (server.py's /internal routes over app/logger.py),
// as the peer speaks it:
//
//   - everything the server writes to stdout/stderr becomes an entry
//     {"t": local ISO-8601 time without a zone, "m": the text written}
//     in a buffer of the latest logCapacity entries; a logging record is
//     one write (message + "\n"), a print is two (text, then "\n");
//   - GET /internal/logs answers one JSON string, the entries joined as
//     t + " - " + m;
//   - GET /internal/logs/raw answers {"entries": [...], "size": {"cols",
//     "rows"}};
//   - PATCH /internal/logs/subscribe {"clientId": id, "enabled": bool}
//     (un)subscribes a WebSocket session and answers 200 with no body; a
//     body without those keys is a 500, as in ComfyUI;
//   - on every flush each subscribed session with an open socket gets
//     {"type": "logs", "data": {"entries": <written since the last flush>,
//     "size": {"cols", "rows"} the first time, else null}}; a subscribed
//     session whose socket is gone is unsubscribed then.

// logCapacity is ComfyUI's default log buffer size (setup_logger).
const logCapacity = 300

// terminal is the size the peer reports for its "terminal".
var terminal = map[string]int{"cols": 120, "rows": 40}

type logEntry struct {
	T string `json:"t"`
	M string `json:"m"`
}

// logState is the peer's log buffer and subscriptions; guarded by Peer.mu.
type logState struct {
	entries  []logEntry
	subs     map[string]bool
	sizeSent bool
}

// write records one write to the server's output.
func (l *logState) write(m string) logEntry {
	e := logEntry{T: time.Now().Format("2006-01-02T15:04:05.000000"), M: m}
	l.entries = append(l.entries, e)
	if len(l.entries) > logCapacity {
		l.entries = append([]logEntry(nil), l.entries[len(l.entries)-logCapacity:]...)
	}
	return e
}

// logf writes a logging record (message plus newline) and flushes it.
func (p *Peer) logf(msg string) { p.emit(msg + "\n") }

// printText writes what print(text) writes, two writes, and flushes.
func (p *Peer) printText(text string) { p.emit(text, "\n") }

// emit writes each piece as one entry, then flushes to the subscribers.
func (p *Peer) emit(pieces ...string) {
	p.mu.Lock()
	if p.logs.subs == nil {
		p.logs.subs = map[string]bool{}
	}
	entries := make([]logEntry, 0, len(pieces))
	for _, m := range pieces {
		entries = append(entries, p.logs.write(m))
	}
	var size any
	if !p.logs.sizeSent {
		size, p.logs.sizeSent = terminal, true
	}
	var to []*socket
	for id := range p.logs.subs {
		s := p.sockets[id]
		if s == nil {
			delete(p.logs.subs, id) // as TerminalService does for a gone socket
			continue
		}
		to = append(to, s)
	}
	p.stats.LogMessages += len(to)
	p.mu.Unlock()
	for _, s := range to {
		p.sendTo(s, "logs", map[string]any{"entries": entries, "size": size})
	}
}

func (p *Peer) getLogs(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	var b strings.Builder
	for _, e := range p.logs.entries {
		b.WriteString(e.T + " - " + e.M)
	}
	p.mu.Unlock()
	writeJSON(w, 200, b.String())
}

func (p *Peer) getRawLogs(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	entries := append([]logEntry{}, p.logs.entries...)
	p.mu.Unlock()
	writeJSON(w, 200, map[string]any{"entries": entries, "size": terminal})
}

func (p *Peer) subscribeLogs(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	var clientID string
	var enabled bool
	if json.NewDecoder(r.Body).Decode(&body) != nil || body["clientId"] == nil || body["enabled"] == nil ||
		json.Unmarshal(body["clientId"], &clientID) != nil || json.Unmarshal(body["enabled"], &enabled) != nil {
		http.Error(w, "500 Internal Server Error", http.StatusInternalServerError)
		return
	}
	p.mu.Lock()
	if p.logs.subs == nil {
		p.logs.subs = map[string]bool{}
	}
	if enabled {
		p.logs.subs[clientID] = true
	} else {
		delete(p.logs.subs, clientID)
	}
	p.stats.LogSubscribes++
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// Logs returns the peer's log buffer as /internal/logs/raw lists it.
func (p *Peer) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.logs.entries))
	for i, e := range p.logs.entries {
		out[i] = e.M
	}
	return out
}

// Print writes text to the peer's output as a print() would, from outside
// any prompt (another job's or a background task's output).
func (p *Peer) Print(text string) { p.printText(text) }
