// Package pgtest gives tests their own slice of the shared local Postgres and
// Redis: a fresh schema per test, a unique Redis key prefix per test. Any
// package's tests may import it.
//
// The servers are required, not optional: a test that needs them and cannot
// reach them fails with a message naming how to start them, because a test
// that skips silently hides a broken setup in CI.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

const (
	// PostgresEnv overrides the base Postgres DSN.
	PostgresEnv = "COMFYGATE_TEST_POSTGRES"
	// RedisEnv overrides the Redis URL.
	RedisEnv = "COMFYGATE_TEST_REDIS"

	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultRedis    = "redis://127.0.0.1:6379/0"

	postgresStart = "start one with: docker run -d --name comfygate-pg -p 5432:5432 " +
		"-e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test postgres:17 " +
		"(or point " + PostgresEnv + " at a server)"
	redisStart = "start one with: docker run -d --name comfygate-redis -p 6379:6379 redis:7 " +
		"(or point " + RedisEnv + " at a server)"

	// reachTimeout bounds the reachability check so that a missing server
	// fails fast instead of hanging the test binary.
	reachTimeout = 10 * time.Second
)

// DSN creates a uniquely named schema on the test Postgres server and returns
// a DSN whose search_path is that schema, so everything the test creates
// lands there. The schema is dropped (CASCADE) when the test ends; close any
// pool built on the DSN in a t.Cleanup registered after calling DSN so that
// it runs first.
func DSN(t testing.TB) string {
	t.Helper()
	base := basePostgres()
	schema := "t_" + sanitize(t.Name(), 30) + "_" + randomHex(t, 8)

	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: Postgres unreachable at %s: %v; %s", redactURL(base), err, postgresStart)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", schema, err)
	}

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("pgtest: drop schema %s: connect: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})

	dsn, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// RedisURL returns the test Redis URL after checking that the server answers
// PING. Pair it with KeyPrefix: the database is shared by every test.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(RedisEnv)
	if u == "" {
		u = defaultRedis
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("pgtest: bad %s %q: %v", RedisEnv, redactURL(u), err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("pgtest: Redis unreachable at %s: %v; %s", redactURL(u), err, redisStart)
	}
	return u
}

// KeyPrefix returns a Redis key prefix unique to this test (ending in ":").
// Keys under it are deleted when the test ends, best effort.
func KeyPrefix(t testing.TB) string {
	t.Helper()
	prefix := "comfygate-test:" + sanitize(t.Name(), 40) + ":" + randomHex(t, 8) + ":"
	t.Cleanup(func() { deleteKeys(t, prefix) })
	return prefix
}

// deleteKeys removes every key under prefix. Failures are logged, not fatal:
// the prefix is unique, so leftovers cannot disturb another test.
func deleteKeys(t testing.TB, prefix string) {
	u := os.Getenv(RedisEnv)
	if u == "" {
		u = defaultRedis
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		return
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	iter := client.Scan(ctx, 0, escapeGlob(prefix)+"*", 200).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("pgtest: scan %s*: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := client.Del(ctx, keys...).Err(); err != nil {
			t.Logf("pgtest: delete %d keys under %s: %v", len(keys), prefix, err)
		}
	}
}

func basePostgres() string {
	if v := os.Getenv(PostgresEnv); v != "" {
		return v
	}
	return defaultPostgres
}

// withSearchPath adds search_path as a runtime parameter; pgx sends unknown
// DSN parameters to the server as session settings.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", PostgresEnv, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// Keyword/value form. The schema name is [a-z0-9_] only, so no quoting.
	return dsn + " search_path=" + schema, nil
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// sanitize turns a test name into a short identifier fragment, so a leftover
// schema or key can be traced to its test.
func sanitize(name string, max int) string {
	s := unsafeChars.ReplaceAllString(strings.ToLower(name), "_")
	s = strings.Trim(s, "_")
	if len(s) > max {
		s = s[:max]
	}
	return s
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: random: %v", err)
	}
	return hex.EncodeToString(b)
}

var globChars = regexp.MustCompile(`([*?\[\]\\])`)

func escapeGlob(s string) string { return globChars.ReplaceAllString(s, `\$1`) }

// redactURL hides any password in a URL before it reaches a log line.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
