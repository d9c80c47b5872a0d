package partner

import "time"

// job is one queued generation on a fal or BFL peer. Its per-call switches
// are copied at submit, so SetOptions does not change a running job.
type job struct {
	id      string
	app     string // fal model id without subpath; empty for BFL
	cfg     config
	in      input
	doneAt  time.Time
	forced  bool // CompleteAll
	polls   int
	cancel  bool
	settled bool // terminal answer delivered or cancelled: no longer in flight
}

// submitJob records an accepted submission and returns the new job.
func (p *Peer) submitJob(app string, in input, cfg config) *job {
	j := &job{id: newID(), app: app, cfg: cfg, in: in, doneAt: time.Now().Add(cfg.latency)}
	p.mu.Lock()
	p.jobs[j.id] = j
	p.mu.Unlock()
	p.submissions.Add(1)
	p.enter()
	return j
}

// done reports whether the job's work has finished. Call with p.mu held.
func (j *job) done(now time.Time) bool {
	if j.cancel || j.forced {
		return true
	}
	return !j.cfg.neverComplete && !now.Before(j.doneAt)
}

// settle takes the job out of flight once. Call with p.mu held.
func (p *Peer) settle(j *job) {
	if !j.settled {
		j.settled = true
		p.leave()
	}
}
