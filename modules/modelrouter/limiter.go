package modelrouter

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/modules/comfygate"
	"github.com/comfygate/comfygate/storage"
)

// limiterPool shares one limiter per Redis URL (or one in-process limiter)
// across handlers and config reloads: leases and their heartbeats outlive a
// reload, and the Redis connection pool is not rebuilt per config.
var limiterPool = caddy.NewUsagePool()

type pooledLimiter struct{ limits.Limiter }

func (p pooledLimiter) Destruct() error { return p.Close() }

func loadLimiter(redisURL, prefix string, ttl time.Duration) (limits.Limiter, string, error) {
	key := fmt.Sprintf("memory|%d", ttl)
	if redisURL != "" {
		key = fmt.Sprintf("redis|%s|%s|%d", redisURL, prefix, ttl)
	}
	v, _, err := limiterPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		var l limits.Limiter
		var err error
		if redisURL != "" {
			l, err = limits.OpenRedis(redisURL, prefix, ttl)
		} else {
			l, err = limits.NewMemory(ttl, nil)
		}
		if err != nil {
			return nil, err
		}
		return pooledLimiter{l}, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("limiter: %w", err)
	}
	return v.(pooledLimiter).Limiter, key, nil
}

// appRouterStore reaches the app's store lazily: the app opens its backends
// on first use, after provisioning.
type appRouterStore struct{ app *comfygate.App }

var errNoRouterStore = fmt.Errorf("model_router: the storage backend keeps no router records")

func (s appRouterStore) store() (storage.RouterStore, error) {
	if err := s.app.Ready(); err != nil {
		return nil, err
	}
	rs, ok := s.app.Store().(storage.RouterStore)
	if !ok {
		return nil, errNoRouterStore
	}
	return rs, nil
}

func (s appRouterStore) CreateRouterCall(ctx context.Context, c storage.RouterCall, ttl time.Duration) (storage.RouterCall, error) {
	rs, err := s.store()
	if err != nil {
		return storage.RouterCall{}, err
	}
	return rs.CreateRouterCall(ctx, c, ttl)
}

func (s appRouterStore) UpdateRouterCall(ctx context.Context, c storage.RouterCall) error {
	rs, err := s.store()
	if err != nil {
		return err
	}
	return rs.UpdateRouterCall(ctx, c)
}

func (s appRouterStore) GetRouterCall(ctx context.Context, id string) (storage.RouterCall, error) {
	rs, err := s.store()
	if err != nil {
		return storage.RouterCall{}, err
	}
	return rs.GetRouterCall(ctx, id)
}

func (s appRouterStore) FindRouterCallByKey(ctx context.Context, ws, key string) (storage.RouterCall, error) {
	rs, err := s.store()
	if err != nil {
		return storage.RouterCall{}, err
	}
	return rs.FindRouterCallByKey(ctx, ws, key)
}

func (s appRouterStore) ReleaseRouterKey(ctx context.Context, ws, key, id string) error {
	rs, err := s.store()
	if err != nil {
		return err
	}
	return rs.ReleaseRouterKey(ctx, ws, key, id)
}

func (s appRouterStore) RecordRouterCalls(ctx context.Context, calls []storage.RouterCall) error {
	rs, err := s.store()
	if err != nil {
		return err
	}
	return rs.RecordRouterCalls(ctx, calls)
}

func (s appRouterStore) DeleteExpiredRouterKeys(ctx context.Context, t time.Time) (int, error) {
	rs, err := s.store()
	if err != nil {
		return 0, err
	}
	return rs.DeleteExpiredRouterKeys(ctx, t)
}

func (s appRouterStore) TouchRouterCall(ctx context.Context, id string) (bool, error) {
	rs, err := s.store()
	if err != nil {
		return false, err
	}
	return rs.TouchRouterCall(ctx, id)
}

func (s appRouterStore) ClaimStaleRouterCall(ctx context.Context, id string, staleFor time.Duration) (bool, error) {
	rs, err := s.store()
	if err != nil {
		return false, err
	}
	return rs.ClaimStaleRouterCall(ctx, id, staleFor)
}

// appAssets stores copied router results through the app's assets service,
// reached lazily like appRouterStore.
type appAssets struct{ app *comfygate.App }

func (a appAssets) Keep(ctx context.Context, account string, r io.Reader, in assets.Stored) (storage.Asset, error) {
	if err := a.app.Ready(); err != nil {
		return storage.Asset{}, err
	}
	return a.app.Assets().Keep(ctx, account, r, in)
}
