// Package comfyui runs jobs on pools of ComfyUI servers over ComfyUI's own
// HTTP + WebSocket protocol. A Pool is a jobs.Executor: it keeps one
// long-lived socket per worker, builds the pool's node catalog from the
// workers' /object_info, stages a job's assets with /upload/image, submits
// the graph with /prompt and turns the worker's events into progress,
// previews and outputs. It absorbs the protocol's traps (a 200 carrying
// node_errors, history written after execution_success, history lost on
// restart, events sent only to the submitting client_id) and the workers'
// failures (crashes, dropped sockets), which become jobs.WorkerLostError so
// that the dispatcher hands the job to another worker.
//
// Staged inputs: ComfyUI has no route that deletes a file from its input
// directory (only /history and /queue entries can be deleted), so staged
// inputs are uploaded into a per-job subfolder, comfygate/<job id>. A worker
// whose input directory the gateway can reach (WorkerConfig.InputDir) has
// that subfolder removed from disk when each attempt on it ends; on other
// workers the subfolder stays for the operator to prune.
package comfyui

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"
)

// WorkerConfig is one ComfyUI server of a pool.
type WorkerConfig struct {
	// URL is the server's base URL, for example http://127.0.0.1:8188.
	URL string `json:"url"`
	// Headers are sent on every request and on the WebSocket handshake (for
	// example a token for a proxy in front of ComfyUI). Never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// Concurrency is how many attempts this pool keeps on the worker at once
	// (running or waiting in its queue). Default 1.
	Concurrency int `json:"concurrency,omitempty"`
	// InputDir is the worker's ComfyUI input directory as this process sees
	// it (ComfyUI/input, or its --input-directory), for a gateway that runs
	// beside ComfyUI. When set, every attempt on this worker ends by removing
	// <InputDir>/comfygate/<job id> (whatever the outcome), since ComfyUI
	// cannot delete inputs over HTTP. Nothing else under InputDir is ever
	// touched. Empty: staged inputs stay on the worker. A relative path is
	// relative to the process's working directory.
	InputDir string `json:"input_dir,omitempty"`
}

// DNSConfig is a source of workers: a name re-resolved every Refresh;
// each address it resolves to is a worker, and a worker whose address
// leaves the answer drains (no new jobs; running ones finish).
type DNSConfig struct {
	// Name is resolved as an SRV name (whose targets are then resolved to
	// addresses, each with the record's port) when it starts with an
	// underscore (_comfyui._tcp.example.com), else as A/AAAA.
	Name string `json:"name"`
	// Port is the workers' port for A/AAAA names. Default 8188.
	Port int `json:"port,omitempty"`
	// Scheme is http (default) or https.
	Scheme string `json:"scheme,omitempty"`
	// Refresh is how often the name is re-resolved. Default: the pool's
	// RefreshInterval.
	Refresh time.Duration `json:"refresh,omitempty"`
	// Resolver is a DNS server (host:port) to ask instead of the system's.
	Resolver string `json:"resolver,omitempty"`
	// Headers and Concurrency apply to every worker of the source.
	Headers     map[string]string `json:"headers,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
}

// Config configures a Pool. Zero durations take the defaults below.
type Config struct {
	Workers []WorkerConfig `json:"workers,omitempty"`
	// DNS are sources of workers that come and go (see DNSConfig).
	DNS []DNSConfig `json:"dns,omitempty"`
	// RefreshInterval is how often each worker's /object_info is re-read
	// (it is also re-read on every reconnect). Default 1m.
	RefreshInterval time.Duration
	// ReconnectMax caps the backoff between WebSocket reconnects. Default 10s.
	ReconnectMax time.Duration
	// RequestTimeout bounds one HTTP request to a worker (output downloads
	// and uploads included). Default 60s.
	RequestTimeout time.Duration
	// UnhealthyAfter: a worker that stops answering (socket and HTTP) this
	// long is out of rotation and its running attempts return
	// jobs.WorkerLostError. It also bounds how long Execute waits for a
	// healthy worker that has the graph's classes. Default 30s.
	UnhealthyAfter time.Duration
	// Dispatch is the policy that picks a worker: DispatchAffinity (the
	// default) or DispatchLeastBusy.
	Dispatch string `json:"dispatch,omitempty"`
	// AffinityWait is how long a job whose models are warm on a busy worker
	// waits for that worker before it takes a cold idle one. Default 3s.
	AffinityWait time.Duration
	// AffinityModels is how many models per worker the pool remembers (the
	// models of its most recent executions). Default 4.
	AffinityModels int
}

// Dispatch policies.
const (
	// DispatchAffinity prefers an idle worker whose recent executions
	// loaded the job's models, and waits up to AffinityWait for a busy one
	// that has them before taking a cold worker.
	DispatchAffinity = "affinity"
	// DispatchLeastBusy takes the least loaded idle worker.
	DispatchLeastBusy = "least_busy"
)

// Defaults of Config.
const (
	DefaultRefreshInterval = time.Minute
	DefaultReconnectMax    = 10 * time.Second
	DefaultRequestTimeout  = 60 * time.Second
	DefaultUnhealthyAfter  = 30 * time.Second
	DefaultAffinityWait    = 3 * time.Second
	DefaultAffinityModels  = 4
)

// historyWait bounds how long a finished prompt's /history entry is awaited
// (ComfyUI writes it after execution_success) and how long a prompt that is
// in neither /queue nor /history is re-checked before it counts as lost.
const historyWait = 3 * time.Second

// cancelWait bounds how long a canceled attempt waits for the worker to
// confirm the interrupt before it returns.
const cancelWait = 10 * time.Second

// previewInterval throttles live previews to about two a second per attempt.
const previewInterval = 500 * time.Millisecond

func (c *Config) applyDefaults() {
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.UnhealthyAfter <= 0 {
		c.UnhealthyAfter = DefaultUnhealthyAfter
	}
	if c.Dispatch == "" {
		c.Dispatch = DispatchAffinity
	}
	if c.AffinityWait <= 0 {
		c.AffinityWait = DefaultAffinityWait
	}
	if c.AffinityModels <= 0 {
		c.AffinityModels = DefaultAffinityModels
	}
	for i := range c.Workers {
		if c.Workers[i].Concurrency == 0 {
			c.Workers[i].Concurrency = 1
		}
	}
	for i := range c.DNS {
		d := &c.DNS[i]
		if d.Port == 0 {
			d.Port = 8188
		}
		if d.Scheme == "" {
			d.Scheme = "http"
		}
		if d.Refresh <= 0 {
			d.Refresh = c.RefreshInterval
		}
		if d.Concurrency == 0 {
			d.Concurrency = 1
		}
	}
}

func (c *Config) validate() error {
	for _, d := range c.DNS {
		switch {
		case d.Name == "":
			return errors.New("comfyui: a dns source needs a name")
		case d.Scheme != "http" && d.Scheme != "https":
			return fmt.Errorf("comfyui: dns %q: scheme must be http or https", d.Name)
		case d.Port < 1 || d.Port > 65535:
			return fmt.Errorf("comfyui: dns %q: port %d out of range", d.Name, d.Port)
		case d.Concurrency < 1:
			return fmt.Errorf("comfyui: dns %q: concurrency must be positive", d.Name)
		}
	}
	if c.Dispatch != DispatchAffinity && c.Dispatch != DispatchLeastBusy {
		return fmt.Errorf("comfyui: dispatch %q: want %s or %s", c.Dispatch, DispatchAffinity, DispatchLeastBusy)
	}
	seen := map[string]bool{}
	for i, w := range c.Workers {
		if err := w.validate(i); err != nil {
			return err
		}
		if seen[w.URL] {
			return fmt.Errorf("comfyui: worker %q is listed twice", w.URL)
		}
		seen[w.URL] = true
	}
	return nil
}

func (w *WorkerConfig) validate(i int) error {
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("comfyui: worker %d: url %q must be an absolute http(s) URL", i, w.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("comfyui: worker %d: url %q must not have a query or fragment", i, w.URL)
	}
	if w.Concurrency < 1 {
		return fmt.Errorf("comfyui: worker %q: concurrency must be positive", w.URL)
	}
	if w.InputDir != "" && filepath.Clean(w.InputDir) == string(filepath.Separator) {
		return fmt.Errorf("comfyui: worker %q: input_dir must not be the root directory", w.URL)
	}
	return nil
}

// healthInterval is how often a worker is probed with GET /prompt.
func (c *Config) healthInterval() time.Duration {
	d := c.UnhealthyAfter / 5
	return min(max(d, 50*time.Millisecond), 5*time.Second)
}
