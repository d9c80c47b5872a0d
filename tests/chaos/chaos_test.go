package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMain writes RELIABILITY.md from the scenarios and the soak that ran
// when COMFYGATE_CHAOS_REPORT names a file (see tests/chaos/long).
func TestMain(m *testing.M) {
	started := time.Now()
	code := m.Run()
	if path := os.Getenv("COMFYGATE_CHAOS_REPORT"); path != "" {
		soakMu.Lock()
		soak := soakResult
		soakMu.Unlock()
		if soak != nil {
			// The plot's path as RELIABILITY.md links it.
			copied := *soak
			if rel, err := filepath.Rel(filepath.Dir(path), soak.Plot); err == nil {
				copied.Plot = rel
			}
			soak = &copied
		}
		var lastSoak string
		var lastRows []string
		if old, err := os.ReadFile(path); err == nil {
			lastRows = TableRows(string(old))
			if soak == nil {
				lastSoak = SoakSection(string(old))
			}
		}
		if err := os.WriteFile(path, []byte(Markdown(Results(), lastRows, soak, lastSoak, Long(), started)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// sideBySide lets a short form run beside another (go test's -parallel,
// GOMAXPROCS at a time): each stack has its own database, Redis database,
// bucket, proxies and peers. The long forms run one at a time, as their
// recovery times go into RELIABILITY.md.
func sideBySide(t *testing.T) {
	if !Long() {
		t.Parallel()
	}
}

// pick is the short form's value, or the long one with LongEnv.
func pick(short, long time.Duration) time.Duration {
	if Long() {
		return long
	}
	return short
}

// hold keeps a fault until the scenario's hold ends.
func hold(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// holding is a scenario's Inject that applies fault to the target's proxy
// and holds it until the scenario's hold ends.
func holding(target string, fault func(p *Proxy) error) func(ctx context.Context, t *testing.T, s *Stack) error {
	return func(ctx context.Context, t *testing.T, s *Stack) error {
		if err := fault(s.Faults.Proxy(target)); err != nil {
			return err
		}
		return hold(ctx)
	}
}

// keyKeptUnknown is an open finding of the scenarios that drop Postgres
// connections: a create whose connection died after its statement or
// COMMIT was written has an unknown outcome. The store learns it when it
// can (storage/postgres/indoubt.go: committed → success, absent → the key
// is released), but not when no primary answers within its 10 s bound
// (the long Postgres-down scenario refuses connections for 30 s): then
// the gateway keeps its Idempotency-Key as the contract says, and when
// nothing was in fact created the client's retry gets
// idempotency_key_reuse and there is no job to poll. (Creates that never
// reached the server release the key: fixed, see idem.NotSent.)
const keyKeptUnknown = "its key was refused as used, but no"

// scenario fills in the usual warm-up and after time.
func scenario(name, fault string, holdFor time.Duration, inject func(ctx context.Context, t *testing.T, s *Stack) error) Scenario {
	return Scenario{Name: name, Fault: fault, Warm: pick(2*time.Second, 10*time.Second), Hold: holdFor,
		After: pick(3*time.Second, 20*time.Second), Inject: inject, Open: []string{keyKeptUnknown}}
}

func TestPostgresStall(t *testing.T) {
	sideBySide(t)
	d := pick(5*time.Second, 10*time.Second)
	Run(t, scenario("postgres stall", fmt.Sprintf("Postgres answers nothing for %s (latency toxic %s)", d, d), d,
		holding(PG, func(p *Proxy) error { return p.Latency(int(d.Milliseconds()), 0) })), StackOptions{})
}

func TestPostgresReset(t *testing.T) {
	sideBySide(t)
	d := pick(4*time.Second, 10*time.Second)
	Run(t, scenario("postgres reset", fmt.Sprintf("every Postgres connection reset (RST) on use for %s", d), d,
		holding(PG, func(p *Proxy) error { return p.Reset() })), StackOptions{})
}

func TestPostgresDown(t *testing.T) {
	sideBySide(t)
	d := pick(6*time.Second, 30*time.Second)
	Run(t, scenario("postgres down", fmt.Sprintf("Postgres refuses connections for %s (open ones closed)", d), d,
		holding(PG, func(p *Proxy) error { p.Down(); return nil })), StackOptions{})
}

func TestRedisLatency(t *testing.T) {
	sideBySide(t)
	d := pick(5*time.Second, 30*time.Second)
	Run(t, scenario("redis latency", fmt.Sprintf("Redis answers 200 ms (±50 ms) late both ways for %s", d), d,
		holding(Redis, func(p *Proxy) error { return p.Latency(200, 50) })), StackOptions{})
}

func TestRedisReset(t *testing.T) {
	sideBySide(t)
	d := pick(4*time.Second, 10*time.Second)
	Run(t, scenario("redis reset", fmt.Sprintf("every Redis connection reset (RST) on use for %s", d), d,
		holding(Redis, func(p *Proxy) error { return p.Reset() })), StackOptions{})
}

func TestRedisDown(t *testing.T) {
	sideBySide(t)
	d := pick(6*time.Second, 30*time.Second)
	Run(t, scenario("redis down", fmt.Sprintf("Redis refuses connections for %s (open ones closed)", d), d,
		holding(Redis, func(p *Proxy) error { p.Down(); return nil })), StackOptions{})
}

// TestComfyWorkerBlackholed: the worker running a job vanishes from the
// network (every byte dropped, no connection closed) mid-job.
func TestComfyWorkerBlackholed(t *testing.T) {
	sideBySide(t)
	d := pick(8*time.Second, 30*time.Second)
	Run(t, scenario("comfyui worker blackholed", fmt.Sprintf("the ComfyUI worker running a job blackholed mid-job for %s", d), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			for ctx.Err() == nil {
				for i, p := range s.Peers {
					if p.Running() != "" {
						if err := s.Faults.Proxy([]string{Comfy0, Comfy1}[i]).Blackhole(); err != nil {
							return err
						}
						return hold(ctx)
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			return fmt.Errorf("no worker was running a job during the fault window")
		}), StackOptions{})
}

// TestPartnerSlicesAndHangs: the partner's answers arrive in small slices
// and then it stops sending halfway (data dropped, connections open).
func TestPartnerSlicesAndHangs(t *testing.T) {
	sideBySide(t)
	d := pick(8*time.Second, 30*time.Second)
	Run(t, scenario("partner slices and hangs", fmt.Sprintf("partner answers sliced (8 B, 2 ms apart) for %s, then blackholed for %s", d/2, d/2), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			p := s.Faults.Proxy(Partner)
			if err := p.Slicer(8, 2000); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d / 2):
			}
			if err := p.Blackhole(); err != nil {
				return err
			}
			return hold(ctx)
		}), StackOptions{})
}

// TestGatewayKill9: one of two gateways sharing the dependencies is killed
// with SIGKILL every few seconds and started again on its port.
func TestGatewayKill9(t *testing.T) {
	sideBySide(t)
	d := pick(12*time.Second, time.Minute)
	every := 4 * time.Second
	sc := scenario("kill -9 one of two gateways", fmt.Sprintf("SIGKILL of one of two gateways every %s for %s, restarted each time", every, d), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			for ctx.Err() == nil {
				s.Gateways[1].Kill()
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				s.Restart(t, 1)
				select {
				case <-ctx.Done():
				case <-time.After(every - time.Second):
				}
			}
			return nil
		})
	sc.Gateways = 2
	Run(t, sc, StackOptions{})
}

// TestPostgresRestart restarts the machine's real Postgres server
// (pg_ctlcluster) under the workload. It runs only in the long form with
// COMFYGATE_CHAOS_PG_RESTART=1 set, on a machine of one's own: every
// other Postgres user of the machine sees the restart too.
func TestPostgresRestart(t *testing.T) {
	if !Long() || os.Getenv("COMFYGATE_CHAOS_PG_RESTART") == "" {
		t.Skip("long form only, with COMFYGATE_CHAOS_PG_RESTART=1 on a machine of one's own")
	}
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		t.Fatalf("no cluster under /etc/postgresql: %v", err)
	}
	ver := versions[0].Name()
	Run(t, scenario("postgres restart", "the real Postgres server restarted (pg_ctlcluster restart)", 20*time.Second,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", ver, "main", "restart").CombinedOutput()
			if err != nil {
				return fmt.Errorf("pg_ctlcluster restart: %v: %s", err, out)
			}
			return hold(ctx)
		}), StackOptions{})
}

// TestS3Blackhole: the object store stops answering (every byte dropped,
// connections left open) for a while.
func TestS3Blackhole(t *testing.T) {
	sideBySide(t)
	d := pick(5*time.Second, 30*time.Second)
	sc := scenario("s3 blackholed", fmt.Sprintf("the S3 server's traffic dropped both ways for %s (connections left open)", d), d,
		holding(S3, func(p *Proxy) error { return p.Blackhole() }))
	Run(t, sc, StackOptions{})
}
