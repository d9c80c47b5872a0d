package nativeapi

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// Socket is a WebSocket as a Session uses it.
type Socket interface {
	// Read returns the client's next message.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one frame.
	Write(ctx context.Context, f Frame) error
}

// Session timing. The status keepalive is ComfyUI's own message, sent
// often enough that clients which treat 10 s of silence as a dead socket
// (@saintno/comfyui-sdk) keep theirs; the reconcile re-read of each
// followed job covers bus events lost between processes.
var (
	keepaliveEvery = 5 * time.Second
	reconcileEvery = 10 * time.Second
	// countEvery bounds how stale the keepalive's queue_remaining may be.
	countEvery   = 30 * time.Second
	writeTimeout = 10 * time.Second
)

// maxFollowed bounds the prompts one socket follows at once; more are
// still queued and run, and /history reports them.
const maxFollowed = 256

// Session is one /ws connection: ComfyUI's messages for the account's
// prompts submitted with its client id, whichever gateway process queued
// or runs them.
type Session struct {
	Svc      *Service
	Account  string
	ClientID string
	Socket   Socket
	// MaxUploadBytes is announced in the feature_flags answer.
	MaxUploadBytes int64

	out      chan Frame
	meta     atomic.Bool // the client announced supports_preview_metadata
	mu       sync.Mutex
	ctx      context.Context // the session's, for prompts held from QueuePrompt
	closing  bool            // Run waits for its followers: follow no more
	followed map[string]bool
	// finished are prompts followed to their end, oldest first, so that a
	// late announcement of one does not replay it (bounded).
	finished     map[string]bool
	finishedList []string
	wg           sync.WaitGroup
	count        atomic.Int64 // queue_remaining last read
}

// maxFinished bounds the finished prompts a session remembers.
const maxFinished = 1024

// holdTimeout bounds how long a prompt's messages wait for its POST
// /prompt answer (Queued.Announce) before they flow anyway.
var holdTimeout = 5 * time.Second

// Run serves the connection until ctx ends or the socket fails.
func (s *Session) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.out = make(chan Frame, 64)
	s.mu.Lock()
	s.ctx, s.followed, s.finished = ctx, map[string]bool{}, map[string]bool{}
	s.mu.Unlock()
	// Subscribe before anything is read, so no prompt announced meanwhile
	// is missed; and register with the service before the first status is
	// sent, so that every prompt the client queues after it (through this
	// process) is followed from before it can start.
	announced := s.Svc.Jobs.Bus.Subscribe(ClientTopic(s.Account, s.ClientID))
	defer announced.Cancel()
	s.Svc.register(s)
	defer s.Svc.unregister(s)

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.write(ctx, cancel)
	}()
	go s.read(ctx, cancel)

	s.recount(ctx)
	s.send(ctx, StatusFrame(int(s.count.Load()), s.ClientID))
	ids, err := s.Svc.Native.ClientJobs(ctx, s.Account, s.ClientID, maxFollowed)
	if err != nil {
		cancel(apierr.Upstream(err))
	}
	for _, id := range ids {
		s.follow(ctx, id, true)
	}

	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	recount := time.NewTicker(countEvery)
	defer recount.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case e := <-announced.C:
			var a promptAnnouncement
			if json.Unmarshal(e.Data, &a) == nil && a.PromptID != "" {
				s.follow(ctx, a.PromptID, false)
			}
			if announced.Lagged() {
				s.refollow(ctx)
			}
		case <-recount.C:
			s.recount(ctx)
		case <-keepalive.C:
			s.send(ctx, StatusFrame(int(s.count.Load()), ""))
		}
	}
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.wg.Wait()
	<-writerDone
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// refollow looks the session's unfinished prompts up again, after lost
// announcements.
func (s *Session) refollow(ctx context.Context) {
	ids, err := s.Svc.Native.ClientJobs(ctx, s.Account, s.ClientID, maxFollowed)
	if err != nil {
		return
	}
	for _, id := range ids {
		s.follow(ctx, id, false)
	}
}

func (s *Session) recount(ctx context.Context) {
	if n, err := s.Svc.QueueRemaining(ctx, s.Account); err == nil {
		s.count.Store(int64(n))
	}
}

// send queues a frame for the writer, giving up when the session ends.
func (s *Session) send(ctx context.Context, f Frame) {
	select {
	case s.out <- f:
	case <-ctx.Done():
	}
}

// write sends queued frames in order; a write the client does not take in
// writeTimeout ends the session.
func (s *Session) write(ctx context.Context, cancel context.CancelCauseFunc) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-s.out:
			wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
			err := s.Socket.Write(wctx, f)
			wcancel()
			if err != nil {
				cancel(err)
				return
			}
		}
	}
}

// read watches the client: its first message may be feature_flags (which
// is answered); the session ends when the socket closes.
func (s *Session) read(ctx context.Context, cancel context.CancelCauseFunc) {
	first := true
	for {
		msg, err := s.Socket.Read(ctx)
		if err != nil {
			cancel(err)
			return
		}
		if !first {
			continue
		}
		first = false
		var m struct {
			Type string `json:"type"`
			Data struct {
				Meta bool `json:"supports_preview_metadata"`
			} `json:"data"`
		}
		if json.Unmarshal(msg, &m) == nil && m.Type == "feature_flags" {
			s.meta.Store(m.Data.Meta)
			s.send(ctx, FeatureFlagsFrame(s.MaxUploadBytes))
		}
	}
}

// follow starts following a prompt unless it is followed already (or was,
// to its end). join is for a prompt queued before the socket connected:
// it gets only the rest of the prompt (see Follower.Join); any other is
// told from its start, as ComfyUI sends a prompt queued while the socket
// is open (one announced late, from another process, catches up).
func (s *Session) follow(ctx context.Context, jobID string, join bool) {
	if !s.claim(jobID) {
		return
	}
	go func() {
		defer s.wg.Done()
		defer s.done(jobID)
		s.followJob(ctx, jobID, nil, join)
	}()
}

// claim marks jobID followed; false when it is already, was to its end,
// or the session follows all it may.
func (s *Session) claim(jobID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.followed[jobID] || s.finished[jobID] || len(s.followed) >= maxFollowed {
		return false
	}
	s.followed[jobID] = true
	s.wg.Add(1)
	return true
}

// done records that the prompt was followed to its end (or the session's).
func (s *Session) done(jobID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.followed, jobID)
	if len(s.finishedList) >= maxFinished {
		delete(s.finished, s.finishedList[0])
		s.finishedList = s.finishedList[1:]
	}
	s.finished[jobID] = true
	s.finishedList = append(s.finishedList, jobID)
}

// hold follows a prompt about to be queued: its events are subscribed to
// now, before it can start, so that none is missed (the first node's
// executing was, when the prompt ran before its announcement arrived);
// its messages wait until release(true) (its POST /prompt answer is out;
// ComfyUI's clients read the prompt_id first) or holdTimeout.
// release(false) drops it (the prompt was not queued).
func (s *Session) hold(jobID string) (release func(ok bool)) {
	s.mu.Lock()
	ctx := s.ctx
	s.mu.Unlock()
	if ctx == nil || !s.claim(jobID) {
		return func(bool) {}
	}
	sub := s.Svc.Jobs.Bus.Subscribe(jobID)
	gate := make(chan bool, 1)
	go func() {
		defer s.wg.Done()
		timer := time.NewTimer(holdTimeout)
		defer timer.Stop()
		select {
		case ok := <-gate:
			if !ok {
				sub.Cancel()
				s.mu.Lock()
				delete(s.followed, jobID)
				s.mu.Unlock()
				return
			}
		case <-timer.C:
		case <-ctx.Done():
			sub.Cancel()
			return
		}
		defer s.done(jobID)
		s.followJob(ctx, jobID, sub, false)
	}()
	var once sync.Once
	return func(ok bool) { once.Do(func() { gate <- ok }) }
}

// followJob sends one prompt's messages until its end, from sub (the
// job's events since before it was queued, see hold) or, when nil, a
// subscription of its own.
//
// A prompt followed since before it was queued is told from its events,
// in order: a snapshot read now could be ahead of the events not yet
// sent, and would skip what they announce (a node's executing). Storage is
// read only at the end (a terminal status, read after every event of the
// run), when events were lost, and on the reconcile tick.
func (s *Session) followJob(ctx context.Context, jobID string, sub *bus.Subscription, join bool) {
	fresh := sub != nil
	if sub == nil {
		sub = s.Svc.Jobs.Bus.Subscribe(jobID)
	}
	defer sub.Cancel()
	f := NewFollower(jobID)
	emit := func(frames []Frame) {
		for _, fr := range frames {
			s.send(ctx, fr)
		}
	}
	// take sends what a snapshot adds; at the prompt's end, its result,
	// then the queue's status, then executing null, in ComfyUI's order.
	take := func(frames []Frame) bool {
		emit(frames)
		if !f.Done() {
			return true
		}
		s.recount(ctx)
		s.send(ctx, StatusFrame(int(s.count.Load()), ""))
		emit(f.Closing())
		return false
	}
	refresh := func() bool {
		j, err := s.Svc.Jobs.Get(ctx, s.Account, jobID)
		if err != nil {
			return false // gone or not the account's: nothing to follow
		}
		return take(f.Job(j))
	}
	if !join {
		// The prompt was queued while the socket was open: ComfyUI
		// sends every socket the queue's status then, before the
		// prompt's first message.
		s.recount(ctx)
		s.send(ctx, StatusFrame(int(s.count.Load()), ""))
	}
	switch {
	case join:
		j, err := s.Svc.Jobs.Get(ctx, s.Account, jobID)
		if err != nil || !take(f.Join(j)) {
			return
		}
	case !fresh:
		if !refresh() {
			return
		}
		if p, ok := s.Svc.Jobs.Bus.LatestPreview(jobID); ok {
			emit(f.Preview(p.Data, s.meta.Load()))
		}
	}
	reconcile := time.NewTicker(reconcileEvery)
	defer reconcile.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reconcile.C:
			if !refresh() {
				return
			}
		case e := <-sub.C:
			if sub.Lagged() {
				if !refresh() {
					return
				}
				continue
			}
			switch e.Kind {
			case "progress":
				emit(f.Progress(e.Data))
			case "preview":
				emit(f.Preview(e.Data, s.meta.Load()))
			case "output":
				var o storage.Output
				if json.Unmarshal(e.Data, &o) == nil {
					emit(f.Output(o))
				}
			case "status":
				var st struct {
					Status string `json:"status"`
				}
				_ = json.Unmarshal(e.Data, &st)
				more := true
				switch {
				case fresh && st.Status == storage.JobRunning:
					emit(f.Running())
				case fresh && st.Status != "" && !storage.Terminal(st.Status):
				default:
					more = refresh() // at the end, sends the status (take)
				}
				// ComfyUI sends status when its queue changes: a prompt
				// queued or ended. Not on start or cancel: a client (the
				// saintno SDK) that reads /queue on every status would
				// find an interrupted prompt gone before its
				// execution_interrupted and report it missing.
				if more && (st.Status == "" || st.Status == storage.JobQueued || storage.Terminal(st.Status)) {
					s.recount(ctx)
					s.send(ctx, StatusFrame(int(s.count.Load()), ""))
				}
				if !more {
					return
				}
			}
		}
	}
}
