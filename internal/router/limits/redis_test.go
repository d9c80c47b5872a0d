package limits_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/limits/limitstest"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redistest"
)

func openRedis(t testing.TB, ttl time.Duration) *limits.Redis {
	t.Helper()
	return openRedisOn(t, pgtest.RedisURL(t), ttl)
}

// openRedisOn is openRedis on the Redis at url.
func openRedisOn(t testing.TB, url string, ttl time.Duration) *limits.Redis {
	t.Helper()
	l, err := limits.OpenRedis(url, pgtest.KeyPrefix(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestMain(m *testing.M) { redistest.Main(m) }

// The limiter's suite on one server and a Cluster (every script's keys in
// one slot). Not behind Sentinel: once it has found the primary, a
// Sentinel client is a one-server client (the claims and bus suites cover
// the addressing), and the suite's waits, run at most GOMAXPROCS at a
// time, would add a third to its time.
func TestRedisSuite(t *testing.T) {
	for _, tp := range redistest.Topologies(pgtest.RedisURL)[:2] {
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel() // separate servers; the suites mostly wait
			url := tp.URL(t)
			limitstest.Run(t, func(t *testing.T) limitstest.Harness {
				const ttl = 1500 * time.Millisecond
				return limitstest.Harness{Limiter: openRedisOn(t, url, ttl), TTL: ttl, Advance: time.Sleep}
			})
		})
	}
}

func TestRedisUnreachableIsUnavailable(t *testing.T) {
	l, err := limits.OpenRedis("redis://127.0.0.1:1/0", "x:", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Admit(ctx, "ws", limits.Call{ID: "a", Cents: 1}, limits.Limits{MaxInFlight: 1}); !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("admit: %v, want ErrUnavailable", err)
	}
	if _, _, err := l.Inspect(ctx, "ws"); !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("inspect: %v, want ErrUnavailable", err)
	}
}

// TestRedisHeartbeatAfterKeysLost: a FLUSH (or failover to an empty
// replica) loses the lease; the heartbeat says so and Settle still succeeds.
func TestRedisHeartbeatAfterKeysLost(t *testing.T) {
	url := pgtest.RedisURL(t)
	prefix := pgtest.KeyPrefix(t)
	l, err := limits.OpenRedis(url, prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lease, err := l.Admit(ctx, "ws", limits.Call{ID: "a", Cents: 9}, limits.Limits{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := redis.ParseURL(url)
	raw := redis.NewClient(opts)
	defer raw.Close()
	keys, err := raw.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys under prefix: %v, %v", keys, err)
	}
	if err := raw.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Heartbeat(ctx); !errors.Is(err, limits.ErrLeaseLost) {
		t.Fatalf("heartbeat after keys lost: %v, want ErrLeaseLost", err)
	}
	if err := lease.Settle(ctx); err != nil {
		t.Fatalf("settle after keys lost: %v", err)
	}
}

// TestRedisKeysShareHashTag: every key of a workspace carries one hash tag
// (one cluster slot, as the scripts require), even for names with braces,
// and every key expires on its own.
func TestRedisKeysShareHashTag(t *testing.T) {
	url := pgtest.RedisURL(t)
	prefix := pgtest.KeyPrefix(t)
	l, err := limits.OpenRedis(url, prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for _, ws := range []string{"plain-ws", "weird {ws}:with/stuff"} {
		lim := limits.Limits{Rate: []limits.Window{{Name: "m", Period: time.Minute, Max: 3}}}
		lease, err := l.Admit(ctx, ws, limits.Call{ID: "a", Cents: 4}, lim)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Admit(ctx, ws, limits.Call{ID: "b", Cents: 1}, lim); err != nil {
			t.Fatal(err) // left in flight so its lease keys exist
		}
		if err := lease.Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	opts, _ := redis.ParseURL(url)
	raw := redis.NewClient(opts)
	defer raw.Close()
	keys, err := raw.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]int{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		end := strings.IndexByte(rest, '}')
		if !strings.HasPrefix(rest, "{") || end < 0 {
			t.Fatalf("key %q has no hash tag after the prefix", k)
		}
		tags[rest[1:end]]++
		if ttl := raw.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no expiry (%v)", k, ttl)
		}
	}
	// Per workspace: leases, cost, rate.
	if len(tags) != 2 || tags["plain-ws"] != 3 {
		t.Fatalf("keys %v: tags %v, want 2 tags with 3 keys each", keys, tags)
	}
}

func TestKeepAliveRedis(t *testing.T) {
	testKeepAlive(t, openRedis(t, limits.MinLeaseTTL*3))
}

// BenchmarkRedisAdmitSettle measures one admitted call's limiter cost: one
// Admit and one Settle, two round trips, with every limit kind enabled.
func BenchmarkRedisAdmitSettle(b *testing.B) {
	l := openRedis(b, 0)
	ctx := context.Background()
	lim := limits.Limits{MaxInFlight: 1000, SpendCeilingCents: 1 << 40,
		Rate: []limits.Window{{Name: "minute", Period: time.Minute, Max: 1 << 30}}}
	b.ReportAllocs()
	raw := rawRedis(b)
	before := evalshaUsec(b, raw)
	i := 0
	for b.Loop() {
		i++
		lease, err := l.Admit(ctx, "bench", limits.Call{ID: fmt.Sprint("c", i), Cents: 5}, lim)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Settle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((evalshaUsec(b, raw)-before)/float64(b.N), "server-µs/call")
}

// BenchmarkRedisAdmitSettleParallel is the same under 32 concurrent callers
// (one workspace, so every script serialises on its keys as in production).
func BenchmarkRedisAdmitSettleParallel(b *testing.B) {
	l := openRedis(b, 0)
	ctx := context.Background()
	lim := limits.Limits{MaxInFlight: 1000, SpendCeilingCents: 1 << 40}
	var seq atomic.Int64
	b.ReportAllocs()
	raw := rawRedis(b)
	before := evalshaUsec(b, raw)
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("c", seq.Add(1))
			lease, err := l.Admit(ctx, "bench", limits.Call{ID: id, Cents: 5}, lim)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Settle(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric((evalshaUsec(b, raw)-before)/float64(b.N), "server-µs/call")
}

func rawRedis(tb testing.TB) *redis.Client {
	opts, err := redis.ParseURL(pgtest.RedisURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	c := redis.NewClient(opts)
	tb.Cleanup(func() { c.Close() })
	return c
}

// evalshaUsec is the time the server spent in EVALSHA so far (INFO
// commandstats; other clients of the same server add to it): the scripts'
// own cost, without the network or the event loop.
func evalshaUsec(tb testing.TB, c *redis.Client) float64 {
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
	}
	return 0
}

func TestRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		d, ttl time.Duration
		want   int
	}{
		{0, 0, 2},
		{9 * time.Second, 0, 2},
		{10 * time.Second, 0, 3},
		{10 * time.Minute, 0, 62},
		{time.Second, 300 * time.Millisecond, 12},
	} {
		if got := limits.RoundTrips(tc.d, tc.ttl); got != tc.want {
			t.Errorf("RoundTrips(%v, %v) = %d, want %d", tc.d, tc.ttl, got, tc.want)
		}
	}
}
