package comfyuipeer

import (
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// Shutdown is a SIGTERM with a graceful stop: the peer closes every socket
// with 1001 (going away), answers new prompts 503, and finishes its queue
// while it still serves its routes (socket reconnects included); linger
// after the queue emptied it closes its listener for good (as Crash). It
// returns at once; the channel closes when the listener is closed.
func (p *Peer) Shutdown(linger time.Duration) <-chan struct{} {
	return p.ShutdownWith(websocket.StatusGoingAway, linger)
}

// ShutdownWith is Shutdown closing the sockets with code (1012, service
// restart, for example).
func (p *Peer) ShutdownWith(code websocket.StatusCode, linger time.Duration) <-chan struct{} {
	p.mu.Lock()
	p.stopping = true
	socks := p.takeSockets()
	p.mu.Unlock()
	closeWith(socks, code)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			p.mu.Lock()
			idle := len(p.pending) == 0 && p.running == nil
			p.mu.Unlock()
			if idle {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(linger)
		p.Crash()
	}()
	return done
}

// Terminate is a SIGTERM that stops at once: every socket is closed with
// 1001 (going away), then the listener and every connection close and the
// running prompt dies.
func (p *Peer) Terminate() {
	p.mu.Lock()
	socks := p.takeSockets()
	p.mu.Unlock()
	closeWith(socks, websocket.StatusGoingAway)
	p.Crash()
}

// closeWith closes the sockets with a close frame of code, without
// waiting for the client's answer.
func closeWith(socks []*socket, code websocket.StatusCode) {
	for _, s := range socks {
		go func() { _ = s.conn.Close(code, "server shutting down") }()
	}
	// Let the close frames leave before the caller tears the server down.
	time.Sleep(20 * time.Millisecond)
}

// refuseWhileStopping answers 503 to a new prompt on a stopping peer.
func (p *Peer) refuseWhileStopping(w http.ResponseWriter) bool {
	p.mu.Lock()
	stopping := p.stopping
	if stopping {
		p.stats.RefusedPrompts++
	}
	p.mu.Unlock()
	if stopping {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
	}
	return stopping
}
