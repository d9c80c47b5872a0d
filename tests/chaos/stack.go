package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
	"github.com/comfygate/comfygate/tests/peers/dnssrv"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// The proxies' names.
const (
	PG      = "postgres"
	Redis   = "redis"
	S3      = "s3"
	Comfy0  = "comfyui-0"
	Comfy1  = "comfyui-1"
	Partner = "partner"
)

// jwtSecret signs the router tokens of the suite.
const jwtSecret = "chaos-suite-router-secret-0123456789abcdef"

// Lease is the jobs lease of the suite's gateways: a job whose gateway or
// worker vanished is taken over within it.
const Lease = 5 * time.Second

// RouterModel is the catalog's one model, a sync JSON partner behind its
// proxy, with RouterDeadline.
const (
	RouterModel    = "acme/echo"
	RouterDeadline = 3 * time.Second
)

// Stack is the dependencies behind their proxies and the gateways in front
// of them.
type Stack struct {
	Faults *Faults
	// DSN and RedisURL reach Postgres and Redis directly, for the checker.
	DSN, RedisURL string
	// RouterPrefix is the router limiter's Redis key prefix.
	RouterPrefix string
	Bucket       s3test.Config
	BucketClient *minio.Client
	Peers        []*comfyuipeer.Peer
	Partner      *partner.Peer
	// DNS lists the workers with StackOptions.DNS.
	DNS      *dnssrv.Server
	Gateways []*gateway.Gateway
	// Workspace is the router calls' workspace; Token its JWT.
	Workspace, Token string
	// AppName is the gateways' Postgres application_name, to count their
	// connections; AdminPort their admin endpoint's port (0: off).
	AppName   string
	AdminPort int

	caddyfile string
	binary    string
}

// StackOptions shape NewStack.
type StackOptions struct {
	// Gateways is how many gateway processes share the dependencies (1
	// when 0).
	Gateways int
	// Binary is the gateway executable; empty means gateway.Binary.
	Binary string
	// Admin turns the admin endpoint (with /metrics) on for the first
	// gateway, on Stack.AdminPort.
	Admin bool
	// Postgres, when set, is the DSN of a database of the test's own (a
	// pgcluster's two-host DSN) that the gateways and the checker use
	// directly, with no proxy in front; empty: a schema of the shared
	// server behind the PG proxy.
	Postgres string
	// RedisURL, when set, is a Redis of the scenario's own (a Sentinel set
	// or a Cluster from storage/redistest) that the gateways reach
	// directly, without a proxy: the scenario injects its faults by
	// killing nodes. Empty: the machine's Redis behind the Redis proxy.
	RedisURL string
	// DNS takes the ComfyUI workers (their proxies) from a local DNS server
	// (Stack.DNS) instead of the config's worker lines.
	DNS bool
}

// redisDBs are the Redis databases the stacks take turns on, one per stack
// alive; no other test package uses them.
var redisDBs = func() chan int {
	c := make(chan int, 4)
	for db := 11; db <= 14; db++ {
		c <- db
	}
	return c
}()

// redisDB takes a free database from redisDBs for the rest of t.
func redisDB(t *testing.T) int {
	db := <-redisDBs
	t.Cleanup(func() { redisDBs <- db })
	return db
}

// NewStack starts the peers, a proxy in front of every dependency and the
// gateways, configured to reach everything through the proxies.
func NewStack(t *testing.T, opts StackOptions) *Stack {
	t.Helper()
	if opts.Gateways == 0 {
		opts.Gateways = 1
	}
	s := &Stack{Faults: NewFaults(t), DSN: opts.Postgres, RouterPrefix: pgtest.KeyPrefix(t),
		Bucket: s3test.Bucket(t), binary: opts.Binary}
	if s.DSN == "" {
		s.DSN = pgtest.DSN(t)
	}
	// Each stack's Redis keys live in a database of their own, so that the
	// soak can count them (DBSIZE) and scenarios can run side by side: the
	// claims and the bus are not prefixed.
	if opts.RedisURL != "" {
		s.RedisURL = opts.RedisURL
	} else {
		s.RedisURL = withPath(t, pgtest.RedisURL(t), "/"+strconv.Itoa(redisDB(t)))
		flushRedis(t, s.RedisURL)
	}
	s.BucketClient = s.Bucket.Client(t)
	s.Peers = []*comfyuipeer.Peer{comfyuipeer.New(t, comfyuipeer.Options{}), comfyuipeer.New(t, comfyuipeer.Options{})}
	s.Partner = partner.NewSyncJSON(t)

	s3 := s.Faults.Add(t, S3, hostOf(t, s.Bucket.Endpoint))
	c0 := s.Faults.Add(t, Comfy0, hostOf(t, s.Peers[0].URL))
	c1 := s.Faults.Add(t, Comfy1, hostOf(t, s.Peers[1].URL))
	pp := s.Faults.Add(t, Partner, hostOf(t, s.Partner.URL))

	bucket := s.Bucket
	bucket.Endpoint = "http://" + s3.Addr
	dir := t.TempDir()
	catalog := filepath.Join(dir, "catalog.json")
	writeCatalog(t, catalog, "http://"+pp.Addr)
	s.Workspace = "ws-chaos"
	s.Token = signToken(t, s.Workspace)
	s.AppName = "comfygate-chaos-" + uuid.NewString()[:8]
	var gwDSN string
	if opts.Postgres == "" {
		pg := s.Faults.Add(t, PG, hostOf(t, s.DSN))
		gwDSN = withHost(t, s.DSN, pg.Addr)
		if u, err := url.Parse(gwDSN); err == nil {
			q := u.Query()
			q.Set("application_name", s.AppName)
			u.RawQuery = q.Encode()
			gwDSN = u.String()
		}
	} else {
		// A keyword/value DSN (host=a,b port=p,q ...).
		gwDSN = s.DSN + " application_name=" + s.AppName
	}
	gwRedis := s.RedisURL
	if opts.RedisURL == "" {
		rd := s.Faults.Add(t, Redis, hostOf(t, s.RedisURL))
		gwRedis = withHost(t, s.RedisURL, rd.Addr)
	}
	s.caddyfile = caddyfile(gwDSN, gwRedis,
		bucket.Caddyfile(s3Timeout), "http://"+c0.Addr, "http://"+c1.Addr, catalog, s.RouterPrefix)
	if opts.DNS {
		s.DNS = startDNS(t, portOf(t, c0.Addr), portOf(t, c1.Addr))
		s.caddyfile = strings.Replace(s.caddyfile, staticWorkers("http://"+c0.Addr, "http://"+c1.Addr), workersDNS(s.DNS.Addr), 1)
	}
	for i := range opts.Gateways {
		cfg := s.caddyfile
		if i == 0 && opts.Admin {
			s.AdminPort = gateway.FreePort(t)
			cfg = strings.Replace(cfg, "admin off", fmt.Sprintf("admin 127.0.0.1:%d", s.AdminPort), 1)
		}
		s.Gateways = append(s.Gateways, gateway.Start(t, cfg, gateway.Options{Binary: s.binary}))
	}
	return s
}

// startGateway runs one gateway on port (0: a free one).
func (s *Stack) startGateway(t *testing.T, port int) *gateway.Gateway {
	t.Helper()
	return gateway.Start(t, s.caddyfile, gateway.Options{Port: port, Binary: s.binary})
}

// Restart starts gateway i again on its port after it was killed.
func (s *Stack) Restart(t *testing.T, i int) {
	t.Helper()
	s.Gateways[i] = s.startGateway(t, s.Gateways[i].Port)
}

// s3Timeout is the stack's `blobs s3 { timeout }`: a silent store fails a
// request within about four of it (three retries), inside HangBound.
const s3Timeout = "timeout 2s"

// staticWorkers is the pool's worker lines.
func staticWorkers(urls ...string) string {
	var workers strings.Builder
	for _, w := range urls {
		fmt.Fprintf(&workers, "\t\t\tworker %s {\n\t\t\t\tconcurrency 1\n\t\t\t}\n", w)
	}
	return workers.String()
}

// portOf is the port of host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func caddyfile(dsn, redisURL, blobs, comfy0, comfy1, catalog, prefix string) string {
	return `{
	admin off
	grace_period 1s
	comfygate {
		storage postgres "` + dsn + `"
		redis "` + redisURL + `"
		` + blobs + `
		max_upload_size 4MiB
		jobs {
			lease ` + Lease.String() + `
			max_attempts 3
		}
		pool gpu comfyui {
` + staticWorkers(comfy0, comfy1) + `			refresh 1m
			unhealthy_after 3s
			reconnect_max 1s
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/*
	route @router {
		error_envelope router
		comfy_auth jwt {
			key HS256 secret ` + jwtSecret + `
		}
		model_router {
			catalog ` + catalog + `
			public_base https://router.test
			allow_insecure_upstreams
			redis_prefix ` + prefix + `
		}
	}
	route {
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs gpu
		error "not found" 404
	}
}
`
}

func writeCatalog(t *testing.T, path, upstream string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"models": []any{map[string]any{
		"id": RouterModel, "adapter": "http", "upstream": upstream, "price_cents": 2,
		"credential": partner.DefaultSecret, "deadline": RouterDeadline.String(),
		"billing": map[string]any{"charges_on_policy_rejection": "no"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func signToken(t *testing.T, ws string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"workspace_id": ws, "exp": time.Now().Add(24 * time.Hour).Unix()}).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func withHost(t *testing.T, raw, host string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host
	return u.String()
}

func withPath(t *testing.T, raw, path string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = path
	return u.String()
}

// flushRedis empties the suite's Redis database.
func flushRedis(t *testing.T, raw string) {
	t.Helper()
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("redis: %v", err)
	}
}
