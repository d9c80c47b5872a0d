package comfygate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/embedded"
	"github.com/comfygate/comfygate/storage/memclaim"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/storage/redisbus"
	"github.com/comfygate/comfygate/storage/redisclaim"
)

// pool shares backends between the configurations that name the same ones,
// so a reload neither reconnects nor runs two SQLite writers on one file.
var pool = caddy.NewUsagePool()

// resourceConfig is everything that identifies a set of backends; its JSON
// form is the pool key.
type resourceConfig struct {
	Storage StorageConfig `json:"storage"`
	Redis   string        `json:"redis"`
	Blobs   BlobsConfig   `json:"blobs"`
}

// resources are the backends of one resourceConfig, opened on first use.
type resources struct {
	cfg    resourceConfig
	logger *zap.Logger

	mu        sync.Mutex
	opened    atomic.Bool // set under mu once open; read without it
	lastErr   error       // the last failed open, under mu
	lastTry   time.Time   // when it was tried, under mu
	store     storage.Store
	claims    storage.ClaimStore
	blobs     blob.Store
	bus       bus.Bus
	extraData *jobs.ExtraDataCache
}

func newResources(cfg resourceConfig, logger *zap.Logger) *resources {
	return &resources{cfg: cfg, logger: logger}
}

// openTimeout bounds opening and migrating the backends.
const openTimeout = 30 * time.Second

// retryOpenAfter is how long a failed open answers for itself: requests
// meanwhile get its error at once instead of each waiting for an attempt
// of their own (the app retries in the background, see App.Start).
const retryOpenAfter = time.Second

// open opens the backends and applies migrations, once, on whichever comes
// first: the app's Start or a request (Caddy starts apps in no fixed order,
// so the HTTP server may take requests before this app has started). It
// runs detached from the caller's context so that one cancelled request
// cannot fail it for everyone. A failure is not remembered for long:
// whatever was opened is closed again, and a call after retryOpenAfter
// tries afresh, so a dependency that was down at first use does not break
// the gateway for good. The error names the dependency (DependencyError).
func (r *resources) open() error {
	// Every request calls this: once open, answer without the lock.
	if r.opened.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opened.Load() {
		return nil
	}
	if r.lastErr != nil && time.Since(r.lastTry) < retryOpenAfter {
		return r.lastErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	r.lastTry = time.Now()
	if r.lastErr = r.doOpen(ctx); r.lastErr != nil {
		return r.lastErr
	}
	r.opened.Store(true)
	return nil
}

// DependencyError is a failure to open one backend.
type DependencyError struct {
	// Dependency is blobs, storage or redis.
	Dependency string
	Err        error
}

func (e *DependencyError) Error() string { return e.Dependency + ": " + e.Err.Error() }
func (e *DependencyError) Unwrap() error { return e.Err }

// dependencies are the backends in the order doOpen opens them.
func (r *resources) dependencies() []string {
	if r.cfg.Redis == "" {
		return []string{"blobs", "storage"}
	}
	return []string{"blobs", "storage", "redis"}
}

func (r *resources) doOpen(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			r.closeAll()
		}
	}()
	if r.blobs, err = openBlobs(r.cfg.Blobs); err != nil {
		return &DependencyError{"blobs", fmt.Errorf("opening blob store: %w", err)}
	}
	if err := r.openStorage(ctx); err != nil {
		return &DependencyError{"storage", err}
	}
	r.extraData = jobs.NewExtraDataCache(extraDataTTL)
	if err := r.openRedis(ctx); err != nil {
		return &DependencyError{"redis", err}
	}
	return nil
}

func (r *resources) openStorage(ctx context.Context) error {
	switch r.cfg.Storage.Backend {
	case "postgres":
		st, err := postgres.Open(ctx, r.cfg.Storage.DSN)
		if err != nil {
			return fmt.Errorf("opening postgres storage: %w", err)
		}
		r.store = st
	default:
		st, err := embedded.Open(r.cfg.Storage.Dir)
		if err != nil {
			return fmt.Errorf("opening embedded storage: %w", err)
		}
		r.store = st
	}
	if err := r.store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrating storage: %w", err)
	}
	return nil
}

func (r *resources) openRedis(ctx context.Context) error {
	if r.cfg.Redis == "" {
		r.claims = memclaim.New()
		r.bus = bus.NewHub()
		return nil
	}
	c, err := redisclaim.New(r.cfg.Redis, redisPrefix)
	if err != nil {
		return fmt.Errorf("configuring redis: %w", err)
	}
	r.claims = c
	b, err := redisbus.New(r.cfg.Redis, redisPrefix)
	if err != nil {
		return fmt.Errorf("configuring redis: %w", err)
	}
	r.bus = b
	if err := b.Start(ctx); err != nil {
		return err
	}
	return nil
}

// redisPrefix namespaces every key and channel comfygate uses in Redis.
const redisPrefix = "comfygate:"

// extraDataTTL bounds how long a job's extra_data is held in memory.
const extraDataTTL = 24 * time.Hour

// closeAll closes whatever is open and forgets it, so that a later open
// starts clean.
func (r *resources) closeAll() error {
	var errs []error
	if r.bus != nil {
		errs = append(errs, r.bus.Close())
	}
	if r.claims != nil {
		errs = append(errs, r.claims.Close())
	}
	if r.store != nil {
		errs = append(errs, r.store.Close())
	}
	r.bus, r.claims, r.store, r.blobs, r.extraData = nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// Destruct closes the backends when no configuration uses them any more.
func (r *resources) Destruct() error { return r.closeAll() }

var _ caddy.Destructor = (*resources)(nil)
