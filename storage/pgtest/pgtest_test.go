package pgtest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestDSNSchemaLifecycle: the DSN lands in a fresh schema of its own, and the
// schema is gone once the test that asked for it ends.
func TestDSNSchemaLifecycle(t *testing.T) {
	var schemas []string
	for i := range 2 {
		t.Run(fmt.Sprint("sub", i), func(t *testing.T) {
			conn, err := pgx.Connect(testCtx(t), pgtest.DSN(t))
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close(context.Background())
			var schema string
			if err := conn.QueryRow(testCtx(t), "SELECT current_schema()").Scan(&schema); err != nil {
				t.Fatalf("current_schema: %v", err)
			}
			if !strings.HasPrefix(schema, "t_") {
				t.Fatalf("current_schema = %q, want the test's own schema", schema)
			}
			// Unqualified names resolve into it.
			if _, err := conn.Exec(testCtx(t), "CREATE TABLE probe (x int)"); err != nil {
				t.Fatalf("create table: %v", err)
			}
			schemas = append(schemas, schema)
		})
	}
	if len(schemas) != 2 || schemas[0] == schemas[1] {
		t.Fatalf("schemas = %v, want two distinct", schemas)
	}
	conn, err := pgx.Connect(testCtx(t), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var left int
	if err := conn.QueryRow(testCtx(t), "SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)", schemas).Scan(&left); err != nil {
		t.Fatalf("count schemas: %v", err)
	}
	if left != 0 {
		t.Errorf("%d of the test schemas survived their tests", left)
	}
}

// TestKeyPrefixUniqueAndCleaned: prefixes differ per call and keys under a
// prefix are deleted when its test ends.
func TestKeyPrefixUniqueAndCleaned(t *testing.T) {
	url := pgtest.RedisURL(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	var prefixes []string
	for i := range 2 {
		t.Run(fmt.Sprint("sub", i), func(t *testing.T) {
			p := pgtest.KeyPrefix(t)
			if err := rdb.Set(testCtx(t), p+"k", "v", time.Hour).Err(); err != nil {
				t.Fatalf("set: %v", err)
			}
			prefixes = append(prefixes, p)
		})
	}
	if len(prefixes) != 2 || prefixes[0] == prefixes[1] {
		t.Fatalf("prefixes = %v, want two distinct", prefixes)
	}
	for _, p := range prefixes {
		if n, err := rdb.Exists(testCtx(t), p+"k").Result(); err != nil || n != 0 {
			t.Errorf("key under %s after its test: exists=%d err=%v, want 0", p, n, err)
		}
	}
}

// fatalRecorder is a testing.TB whose Fatal records the message and stops
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// runFatal calls fn with a recorder in a goroutine and returns the Fatal
// message, or "" when fn returned normally.
func runFatal(t *testing.T, fn func(tb testing.TB)) string {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.msg
}

// TestUnreachableServersFail: a missing server fails the test with a message
// saying how to start one; it never skips and never returns a DSN.
func TestUnreachableServersFail(t *testing.T) {
	tests := []struct {
		name, env, value string
		call             func(tb testing.TB)
		want             []string
	}{
		{"postgres", pgtest.PostgresEnv, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
			func(tb testing.TB) { pgtest.DSN(tb) }, []string{"Postgres unreachable", "docker run", "127.0.0.1:1"}},
		{"redis", pgtest.RedisEnv, "redis://127.0.0.1:1/0?dial_timeout=2s",
			func(tb testing.TB) { pgtest.RedisURL(tb) }, []string{"Redis unreachable", "docker run", "127.0.0.1:1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			msg := runFatal(t, tc.call)
			if msg == "" {
				t.Fatal("no Fatal for an unreachable server")
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Fatal message %q lacks %q", msg, w)
				}
			}
		})
	}
}
