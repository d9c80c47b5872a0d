package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain writes RELIABILITY.md's table from the scenarios that ran when
// COMFYGATE_CHAOS_REPORT names a file (see tests/chaos/long).
func TestMain(m *testing.M) {
	code := m.Run()
	if path := os.Getenv("COMFYGATE_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(Table(Results())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
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

// scenario fills in the usual warm-up and after time.
func scenario(name, fault string, holdFor time.Duration, inject func(ctx context.Context, t *testing.T, s *Stack) error) Scenario {
	return Scenario{Name: name, Fault: fault, Warm: pick(2*time.Second, 10*time.Second), Hold: holdFor,
		After: pick(3*time.Second, 20*time.Second), Inject: inject}
}

func TestPostgresStall(t *testing.T) {
	d := pick(5*time.Second, 10*time.Second)
	Run(t, scenario("postgres stall", fmt.Sprintf("Postgres answers nothing for %s (latency toxic %s)", d, d), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			if err := s.Faults.Proxy(PG).Latency(int(d.Milliseconds()), 0); err != nil {
				return err
			}
			return hold(ctx)
		}), StackOptions{})
}

func TestPostgresReset(t *testing.T) {
	d := pick(4*time.Second, 10*time.Second)
	Run(t, scenario("postgres reset", fmt.Sprintf("every Postgres connection reset (RST) on use for %s", d), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			if err := s.Faults.Proxy(PG).Reset(); err != nil {
				return err
			}
			return hold(ctx)
		}), StackOptions{})
}

func TestPostgresDown(t *testing.T) {
	d := pick(6*time.Second, 30*time.Second)
	Run(t, scenario("postgres down", fmt.Sprintf("Postgres refuses connections for %s (open ones closed)", d), d,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			s.Faults.Proxy(PG).Down()
			return hold(ctx)
		}), StackOptions{})
}
