// Package comfygate is the `comfygate` Caddy app: it owns every long-lived
// resource the gateway's handlers share (storage, claim store, blob store)
// and the background loops that maintain them. Handlers reach it with
// ctx.App("comfygate").
//
// Nothing connects in Provision, so `caddy validate` and `caddy adapt` work
// offline. Backends are opened on Start and shared across config reloads
// through a caddy.UsagePool keyed by their configuration.
package comfygate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/streamlimit"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/internal/version"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/redisconn"
)

func init() {
	caddy.RegisterModule(App{})
}

// Defaults.
const (
	DefaultDataDir        = "./data"
	DefaultMaxUploadBytes = 100 << 20
	// DefaultBuiltinMemory and DefaultJobMemory bound the built-in
	// executor (see App.BuiltinMemory): two 512 MiB jobs at once, which a
	// 2-core machine of a few GB serves beside everything else.
	DefaultBuiltinMemory = 1 << 30
	DefaultJobMemory     = 512 << 20
	sweepInterval        = time.Minute
)

// App is the comfygate app.
type App struct {
	// Storage selects where records are kept. Default: embedded under ./data.
	Storage *StorageConfig `json:"storage,omitempty"`
	// Redis is the Redis for claims, fan-out and limits: a redis:// or
	// rediss:// URL, a redis-sentinel://host,host/master address or a
	// redis-cluster://host,host address (docs/redis-ha.md). When empty these
	// are kept in process (single gateway process only). Accepts {env.X}.
	Redis string `json:"redis,omitempty"`
	// Blobs configures the blob store. Default: file_system under
	// <storage dir>/blobs (or ./data/blobs for postgres).
	Blobs *BlobsConfig `json:"blobs,omitempty"`
	// AssetRetention is the default retention of uploaded assets; zero means
	// they never expire. The per-request expires_in override replaces it.
	AssetRetention caddy.Duration `json:"asset_retention,omitempty"`
	// MaxUploadBytes bounds an upload request body. Default 100 MiB.
	MaxUploadBytes int64 `json:"max_upload_bytes,omitempty"`
	// BuiltinMemory bounds, in bytes, the memory every builtin pool's jobs
	// hold at once in this process: their tensors, decoded inputs and
	// encoded outputs. A job takes the most it will hold, estimated before
	// its first node, and waits while other jobs hold the budget. Default
	// 1 GiB.
	BuiltinMemory int64 `json:"builtin_memory,omitempty"`
	// JobsConfig configures job submission and execution.
	JobsConfig *JobsConfig `json:"jobs,omitempty"`
	// Pools are the worker pools jobs run on. A builtin pool named
	// "builtin" exists even when not listed.
	Pools []*PoolConfig `json:"pools,omitempty"`
	// Reaper bounds the retention sweeps (rows per statement, pause between
	// statements). Default 500 rows, 100ms.
	Reaper *ReaperConfig `json:"reaper,omitempty"`
	// Tracing turns on OpenTelemetry spans for uploads, jobs (one trace per
	// job, across processes) and router calls, exported as the standard
	// OTEL_* environment variables say (OTLP over HTTP to
	// OTEL_EXPORTER_OTLP_ENDPOINT by default). Off by default. See
	// docs/observability.md.
	Tracing bool `json:"tracing,omitempty"`

	ctx         caddy.Context
	logger      *zap.Logger
	stopTracing func(context.Context) error
	key         string
	res         *resources
	executors   map[string]poolExecutor
	poolKeys    []string
	stopping    chan struct{}
	stopOnce    *sync.Once
	streams     *streamlimit.Limiter
	cancel      context.CancelFunc
	// cancelRuns and runCtx govern running attempts (see Start).
	cancelRuns context.CancelFunc
	runCtx     context.Context
	stopped    []<-chan struct{}
	// orphanCursor is where the orphan-blob sweep goes on (maintain's
	// goroutine only).
	orphanCursor blob.Ref
}

// StorageConfig selects a storage backend.
type StorageConfig struct {
	// Backend is "embedded" (default) or "postgres".
	Backend string `json:"backend,omitempty"`
	// Dir is the embedded backend's directory. Default ./data.
	Dir string `json:"dir,omitempty"`
	// DSN is the postgres connection string. Accepts {env.X}.
	DSN string `json:"dsn,omitempty"`
}

// BlobsConfig selects a blob store.
type BlobsConfig struct {
	// Backend is "file_system" (default) or "s3".
	Backend string `json:"backend,omitempty"`
	// Dir is the file_system store's root directory.
	Dir string `json:"dir,omitempty"`
	// S3 configures the s3 store.
	S3 *S3BlobsConfig `json:"s3,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "comfygate",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision resolves placeholders and defaults and takes a reference to the
// shared resources for this configuration. It opens no connection.
func (a *App) Provision(ctx caddy.Context) error {
	a.ctx = ctx
	a.logger = ctx.Logger()
	a.applyDefaults()
	a.streams = streamlimit.New(a.JobsConfig.MaxStreams)
	if a.Tracing {
		release, err := tracing.Enable(ctx, "comfygate", version.Read().Version)
		if err != nil {
			return err
		}
		a.stopTracing = release
	}
	if err := a.provisionPools(); err != nil {
		return err
	}
	a.stopping = make(chan struct{})
	a.stopOnce = new(sync.Once)
	eventsApp, err := ctx.App("events")
	if err != nil {
		return err
	}
	if err := eventsApp.(*caddyevents.App).On("stopping", stoppingHandler{a.signalStopping}); err != nil {
		return err
	}
	cfg := a.resourceConfig()
	keyBytes, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	a.key = string(keyBytes)
	val, _, err := pool.LoadOrNew(a.key, func() (caddy.Destructor, error) {
		return newResources(cfg, a.logger), nil
	})
	if err != nil {
		return err
	}
	a.res = val.(*resources)
	return a.registerMetrics(ctx)
}

// applyDefaults resolves placeholders and fills in defaults.
func (a *App) applyDefaults() {
	repl := caddy.NewReplacer()
	if a.Storage == nil {
		a.Storage = &StorageConfig{}
	}
	if a.Storage.Backend == "" {
		a.Storage.Backend = "embedded"
	}
	a.Storage.DSN = repl.ReplaceKnown(a.Storage.DSN, "")
	a.Storage.Dir = repl.ReplaceKnown(a.Storage.Dir, "")
	a.Redis = repl.ReplaceKnown(a.Redis, "")
	if a.Storage.Backend == "embedded" && a.Storage.Dir == "" {
		a.Storage.Dir = DefaultDataDir
	}
	a.applyBlobDefaults(repl)
	if a.MaxUploadBytes == 0 {
		a.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if a.BuiltinMemory == 0 {
		a.BuiltinMemory = DefaultBuiltinMemory
	}
	if a.JobsConfig == nil {
		a.JobsConfig = &JobsConfig{}
	}
	a.JobsConfig.applyDefaults()
	if a.Reaper == nil {
		a.Reaper = &ReaperConfig{}
	}
	a.Reaper.applyDefaults()
}

// resourceConfig is the part of the configuration that names backends.
func (a *App) resourceConfig() resourceConfig {
	return resourceConfig{Storage: *a.Storage, Redis: a.Redis, Blobs: *a.Blobs}
}

// Validate checks the configuration without touching the network.
func (a *App) Validate() error {
	switch a.Storage.Backend {
	case "embedded":
	case "postgres":
		if a.Storage.DSN == "" {
			return fmt.Errorf("comfygate: storage postgres needs a DSN")
		}
	default:
		return fmt.Errorf("comfygate: unknown storage backend %q (want embedded or postgres)", a.Storage.Backend)
	}
	if a.Redis != "" {
		// Parsed here, not dialed: a bad address fails the config load.
		if _, err := redisconn.Parse(a.Redis); err != nil {
			return fmt.Errorf("comfygate: redis: %w", err)
		}
	}
	if err := a.Blobs.validate(a.MaxUploadBytes); err != nil {
		return err
	}
	if a.MaxUploadBytes < 0 {
		return fmt.Errorf("comfygate: max_upload_bytes must not be negative")
	}
	if a.BuiltinMemory < 0 {
		return fmt.Errorf("comfygate: builtin_memory must not be negative")
	}
	if a.AssetRetention < 0 {
		return fmt.Errorf("comfygate: asset_retention must not be negative")
	}
	if err := a.validatePools(); err != nil {
		return err
	}
	if err := a.Reaper.validate(); err != nil {
		return err
	}
	return a.JobsConfig.validate()
}

// Start opens the backends (once per configuration; migrations are applied
// before it returns when they answer) and starts the pools' connections,
// the maintenance loop and the dispatchers. A backend that is down does not
// stop the gateway from starting: it keeps trying in the background,
// requests answer 500 upstream_error meanwhile, /readyz (comfy_health)
// names what is down, and the loops start once the backends open.
func (a *App) Start() error {
	a.logger.Info("starting", zap.Stringer("build", version.Read()))
	if err := a.Ready(); err != nil {
		a.logger.Error("opening the backends; the gateway starts and keeps trying", zap.Error(err))
	}
	loopCtx, stop := context.WithCancel(a.ctx)
	// Attempts run on their own context: a reload stops this config's
	// claiming but lets its running attempts finish (they share the pooled
	// backends with the new config); only a process exit cancels them.
	runCtx, stopRuns := context.WithCancel(context.Background())
	a.cancel = stop
	a.cancelRuns = stopRuns
	a.runCtx = runCtx
	for _, pe := range a.executors {
		// Pools connect even on an API-only process: validation needs
		// their node catalogs.
		if pe.start != nil {
			pe.start()
		}
	}
	maintained, dispatched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(maintained)
		if !a.awaitBackends(loopCtx) {
			close(dispatched)
			return
		}
		var dispatchers []<-chan struct{}
		if !a.JobsConfig.NoExecute {
			for name, pe := range a.executors {
				dispatchers = append(dispatchers, a.startDispatcher(loopCtx, name, pe))
			}
		}
		go func() {
			defer close(dispatched)
			for _, done := range dispatchers {
				<-done
			}
		}()
		a.maintain(loopCtx)
	}()
	a.stopped = []<-chan struct{}{maintained, dispatched}
	running.Store(a)
	return nil
}

// awaitBackends opens the backends, retrying with a growing pause until
// they open or ctx ends (Start logged the first failure; later ones are
// logged once a minute); it reports whether they are open.
func (a *App) awaitBackends(ctx context.Context) bool {
	pause, lastLog, failed := time.Second, time.Now(), false
	for {
		err := a.Ready()
		if err == nil {
			if failed {
				a.logger.Info("backends are open")
			}
			return true
		}
		failed = true
		if time.Since(lastLog) >= time.Minute {
			a.logger.Error("opening the backends; retrying in the background", zap.Error(err))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
	}
}

// signalStopping closes the Stopping channel, once.
func (a *App) signalStopping() { a.stopOnce.Do(func() { close(a.stopping) }) }

// stoppingHandler adapts a function to Caddy's event handler interface.
type stoppingHandler struct{ fn func() }

func (h stoppingHandler) Handle(context.Context, caddy.Event) error {
	h.fn()
	return nil
}

// Stop ends the maintenance loops and the dispatcher, waiting for runs in
// progress to return (they hand their jobs on through their leases). Shared
// resources stay open for the next configuration; Cleanup releases this
// configuration's reference.
func (a *App) Stop() error {
	running.CompareAndSwap(a, nil)
	a.signalStopping()
	if a.cancel == nil {
		return nil
	}
	a.cancel()
	if !caddy.Exiting() {
		// A reload: dispatchers have stopped claiming; attempts in flight
		// finish in the background and their dispatchers end after them.
		<-a.stopped[0]
		return nil
	}
	a.cancelRuns()
	for _, done := range a.stopped {
		<-done
	}
	return nil
}

// Cleanup releases this configuration's references to the shared
// resources and pools.
func (a *App) Cleanup() error {
	var errs []error
	if a.stopTracing != nil {
		// Export what is buffered, within a bound.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, a.stopTracing(ctx))
		cancel()
	}
	for _, k := range a.poolKeys {
		_, err := pool.Delete(k)
		errs = append(errs, err)
	}
	if a.key != "" {
		_, err := pool.Delete(a.key)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Ready opens the shared backends if they are not open yet. Handlers call
// it before using them.
func (a *App) Ready() error {
	if err := a.res.open(); err != nil {
		return fmt.Errorf("comfygate: %w", err)
	}
	return nil
}

// Store returns the storage backend. Valid after Ready.
func (a *App) Store() storage.Store { return a.res.store }

// RedisURL is the configured Redis, or "" when state is kept in process.
func (a *App) RedisURL() string { return a.Redis }

// Claims returns the claim store. Valid after Ready.
func (a *App) Claims() storage.ClaimStore { return a.res.claims }

// BlobStore returns the blob store. Valid after Ready.
func (a *App) BlobStore() blob.Store { return a.res.blobs }

// Presigner returns the blob store's URL presigner, or nil when content is
// served through the gateway. Valid after Ready.
func (a *App) Presigner() blob.Presigner { return a.res.presigner() }

// Assets returns the assets service.
func (a *App) Assets() *assets.Service {
	return &assets.Service{
		Store:            a.res.store,
		Blobs:            a.res.blobs,
		DefaultRetention: time.Duration(a.AssetRetention),
		MaxUploadBytes:   a.MaxUploadBytes,
	}
}

// maintain sweeps expired assets, the bytes of unreferenced blobs, stale
// temp files and orphan blobs until ctx ends.
func (a *App) maintain(ctx context.Context) {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		metrics.LastHour.Record(time.Now())
		n, err := a.Reaper.sweep().Drain(ctx, a.Assets().SweepExpired)
		if err != nil && ctx.Err() == nil {
			a.logger.Error("sweeping expired assets", zap.Error(err))
		} else if n > 0 {
			a.logger.Info("swept expired assets", zap.Int("count", n))
		}
		n, err = a.Reaper.sweep().Drain(ctx, a.Assets().SweepUnreferenced)
		if err != nil && ctx.Err() == nil {
			a.logger.Error("removing unreferenced blobs", zap.Error(err))
		} else if n > 0 {
			a.logger.Info("removed the bytes of unreferenced blobs", zap.Int("count", n))
		}
		if _, err := a.res.blobs.Sweep(ctx, time.Hour); err != nil && ctx.Err() == nil {
			a.logger.Error("sweeping stale upload files", zap.Error(err))
		}
		a.sweepOrphans(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
