package integration

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
)

// pricedGlobal is b's comfygate option with the builtin pool priced at 5
// credits a job plus 2 a second (at most 200), one job at a time, and
// leases short enough to see a dead process's job reclaimed.
func pricedGlobal(t *testing.T, b backend, dir string, maxAttempts int) string {
	return b.global(t, dir) + fmt.Sprintf(`
		jobs {
			lease 2s
			max_attempts %d
		}
		pool builtin builtin {
			concurrency 1
			price {
				per_job 5
				per_second 2
			}
			max_charge 200
		}`, maxAttempts)
}

// creditsCLI runs `comfygate credits` against g's config and returns its
// standard output.
func creditsCLI(t *testing.T, g *gateway.Gateway, args ...string) string {
	t.Helper()
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	if len(cfgs) == 0 {
		t.Fatalf("no Caddyfile in %s", g.Dir)
	}
	cmd := exec.Command(gateway.Binary(t), append([]string{"credits", "--config", cfgs[0], "--adapter", "caddyfile"}, args...)...)
	cmd.Dir = g.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("credits %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// ledgerLine is one line of `credits ledger --json`.
type ledgerLine struct {
	Kind    string `json:"kind"`
	Amount  int64  `json:"amount"`
	Charged int64  `json:"charged"`
	RunMS   int64  `json:"run_ms"`
	JobID   string `json:"job_id"`
	Balance int64  `json:"balance"`
}

// ledgerOf reads the account's ledger with the CLI and checks that it sums
// to the balance the CLI reports.
func ledgerOf(t *testing.T, g *gateway.Gateway, account string) ([]ledgerLine, int64) {
	t.Helper()
	var lines []ledgerLine
	var sum int64
	for _, l := range strings.Split(strings.TrimSpace(creditsCLI(t, g, "ledger", account, "--json")), "\n") {
		if l == "" {
			continue
		}
		var e ledgerLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("ledger line %q: %v", l, err)
		}
		sum += e.Amount
		if e.Balance != sum || e.Balance < 0 {
			t.Fatalf("ledger line %+v: running balance, want %d", e, sum)
		}
		lines = append(lines, e)
	}
	bal, err := strconv.ParseInt(strings.TrimSpace(creditsCLI(t, g, "balance", account)), 10, 64)
	if err != nil || bal != sum {
		t.Fatalf("balance %d (%v), ledger sums to %d", bal, err, sum)
	}
	return lines, bal
}

// endsOf returns the settlement and refund lines of job id.
func endsOf(lines []ledgerLine, id string) []ledgerLine {
	var out []ledgerLine
	for _, l := range lines {
		if l.JobID == id && (l.Kind == "settlement" || l.Kind == "refund") {
			out = append(out, l)
		}
	}
	return out
}

// checkSettled checks the job's cost against its one ledger ending: charged
// as the job says: 5 + 2 × the seconds its attempt ran, rounded up to a
// whole credit, and that attempt no longer than the job's execution.
func checkSettled(t *testing.T, g *gateway.Gateway, j map[string]any, wantCharged bool) int64 {
	t.Helper()
	id := j["id"].(string)
	cost, ok := j["cost"].(map[string]any)
	if !ok || cost["reserved"] != float64(200) || cost["credits"] == nil {
		t.Fatalf("job %s (%s) cost = %v, want credits settled and 200 reserved", id, j["status"], j["cost"])
	}
	charged := int64(cost["credits"].(float64))
	lines, _ := ledgerOf(t, g, "local")
	ends := endsOf(lines, id)
	if len(ends) != 1 || ends[0].Charged != charged || ends[0].Amount != 200-charged {
		t.Fatalf("job %s: ledger endings %+v, job charged %d; want exactly one", id, ends, charged)
	}
	if !wantCharged {
		if charged != 0 || ends[0].Kind != "refund" {
			t.Fatalf("job %s (%s): charged %d, want a refund", id, j["status"], charged)
		}
		return 0
	}
	execMS := int64(j["metrics"].(map[string]any)["execution_ms"].(float64))
	if want := 5 + (2*ends[0].RunMS+999)/1000; charged != want || ends[0].RunMS > execMS {
		t.Fatalf("job %s: charged %d for a %d ms run (execution_ms %d), want %d", id, charged, ends[0].RunMS, execMS, want)
	}
	return charged
}

// TestCreditsThroughTheGateway (issue 14, acceptance 2 and 5): a priced
// pool through the real binary on both backends. A submit without credits
// is 402 and its key is reusable; succeeded, failed, canceled-queued and
// canceled-running jobs settle as stated; a gateway killed with -9 (while a
// job runs, and right after one finished) is restarted and every job is
// settled exactly once, a job whose only attempt died being refunded as
// worker_lost; and the CLI's balance, ledger and usage CSV carry the
// figures of the jobs just run.
func TestCreditsThroughTheGateway(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := siteConfig(pricedGlobal(t, b, dir, 1), "comfy_auth none")
			g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
			restart := func() {
				g.Kill()
				g = gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: g.Port})
			}
			quick := map[string]any{"workflow": map[string]any{
				"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}},
				"2": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "q", "images": []any{"1", 0}}}}}
			failing := map[string]any{"workflow": map[string]any{
				"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}},
				"2": map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{"1", 0}, "blur_radius": 15, "sigma": 1}},
				"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "f", "images": []any{"2", 0}}}}}
			submitOK := func(body any) string {
				t.Helper()
				r := submit(t, g, body, nil)
				if r.Status != http.StatusCreated {
					t.Fatalf("submit: %d %s", r.Status, r.Body)
				}
				if c := r.JSON(t)["cost"]; fmt.Sprint(c) != "map[credits:<nil> reserved:200]" {
					t.Fatalf("cost at submit = %v", c)
				}
				return r.JSON(t)["id"].(string)
			}
			wait := func(id string, done func(string) bool) map[string]any {
				return gateway.WaitJob(t, g.URL, id, 120*time.Second, done)
			}

			// 402 without credits; the key is released.
			key := map[string]string{"Idempotency-Key": uuid.NewString()}
			r := submit(t, g, quick, key)
			if r.Status != http.StatusPaymentRequired || r.errorCode(t) != "insufficient_credits" {
				t.Fatalf("submit without credits: %d %s", r.Status, r.Body)
			}
			if out := strings.TrimSpace(creditsCLI(t, g, "grant", "local", "1000", "--note", "first payment")); out != "1000" {
				t.Fatalf("grant printed %q, want the balance 1000", out)
			}
			r = submit(t, g, quick, key)
			if r.Status != http.StatusCreated {
				t.Fatalf("the same key after the grant: %d %s", r.Status, r.Body)
			}
			var ended []map[string]any
			succeeded := wait(r.JSON(t)["id"].(string), gateway.Terminal)
			if succeeded["status"] != "succeeded" {
				t.Fatalf("quick job ended %v", succeeded["status"])
			}
			checkSettled(t, g, succeeded, true)
			ended = append(ended, succeeded)

			failed := wait(submitOK(failing), gateway.Terminal)
			if failed["status"] != "failed" || failed["error"].(map[string]any)["code"] != "node_execution_error" {
				t.Fatalf("failing job: %v %v", failed["status"], failed["error"])
			}
			checkSettled(t, g, failed, true)
			ended = append(ended, failed)

			// One running, one queued behind it: cancel both.
			running := submitOK(map[string]any{"workflow": slowWorkflow(8)})
			wait(running, func(s string) bool { return s == "running" })
			queued := submitOK(quick)
			for _, id := range []string{queued, running} {
				if c := do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil); c.Status != 200 {
					t.Fatalf("cancel: %d %s", c.Status, c.Body)
				}
			}
			canceledQueued := wait(queued, gateway.Terminal)
			canceledRunning := wait(running, gateway.Terminal)
			if canceledQueued["status"] != "canceled" || canceledRunning["status"] != "canceled" {
				t.Fatalf("canceled jobs ended %v and %v", canceledQueued["status"], canceledRunning["status"])
			}
			checkSettled(t, g, canceledQueued, false)
			checkSettled(t, g, canceledRunning, true)
			ended = append(ended, canceledQueued, canceledRunning)

			// kill -9 while a job runs (its only attempt): after the restart
			// the lease runs out and the job fails worker_lost, refunded.
			lost := submitOK(map[string]any{"workflow": slowWorkflow(8)})
			wait(lost, func(s string) bool { return s == "running" })
			restart()
			lostJob := wait(lost, gateway.Terminal)
			if lostJob["status"] != "failed" || lostJob["error"].(map[string]any)["code"] != "worker_lost" {
				t.Fatalf("job of the killed gateway: %v %v", lostJob["status"], lostJob["error"])
			}
			checkSettled(t, g, lostJob, false)
			ended = append(ended, lostJob)

			// kill -9 the moment a job has finished: its settlement
			// committed with its end, and nothing settles it again.
			last := submitOK(quick)
			lastJob := wait(last, gateway.Terminal)
			restart()
			time.Sleep(3 * time.Second) // a lease and a reaper pass on the new process
			checkSettled(t, g, wait(last, gateway.Terminal), true)
			ended = append(ended, lastJob)

			// The CLI's figures are the jobs'.
			lines, bal := ledgerOf(t, g, "local")
			var charged, execMS int64
			for _, j := range ended {
				charged += int64(j["cost"].(map[string]any)["credits"].(float64))
				if ms, ok := j["metrics"].(map[string]any)["execution_ms"].(float64); ok {
					execMS += int64(ms)
				}
				if n := len(endsOf(lines, j["id"].(string))); n != 1 {
					t.Errorf("job %s has %d ledger endings", j["id"], n)
				}
			}
			if bal != 1000-charged || lines[0].Kind != "grant" || lines[0].Amount != 1000 {
				t.Fatalf("balance %d, want 1000 - %d charged; first line %+v", bal, charged, lines[0])
			}
			checkUsage(t, creditsCLI(t, g, "usage", "--csv"), "local", len(ended), execMS, charged)
		})
	}
}

// checkUsage checks the account's row of `credits usage --csv`.
func checkUsage(t *testing.T, out, account string, jobs int, execMS, credits int64) {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "account,jobs,execution_seconds,router_calls,credits" {
		t.Fatalf("usage CSV %q: %v", out, err)
	}
	for _, row := range rows[1:] {
		if row[0] != account {
			continue
		}
		secs, _ := strconv.ParseFloat(row[2], 64)
		if row[1] != strconv.Itoa(jobs) || math.Abs(secs-float64(execMS)/1000) > 0.0005 || row[4] != strconv.FormatInt(credits, 10) {
			t.Fatalf("usage row %v, want %d jobs, %.3f s, %d credits", row, jobs, float64(execMS)/1000, credits)
		}
		return
	}
	t.Fatalf("no usage row for %s in %q", account, out)
}

// TestCreditsCLIDebit (issue 26, item 2): docs/credits.md's form of a debit,
// `credits grant <account> -3`, debits without a "--" before the amount,
// with the command's flags still parsed around it; a debit larger than
// the balance is refused on both backends, says what the balance is, and
// leaves the balance as it was.
func TestCreditsCLIDebit(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		if b.remoteBlobs {
			continue // the ledger is in storage: embedded and Postgres
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "Caddyfile")
			if err := os.WriteFile(cfg, []byte("{\n\tcomfygate {\n\t\t"+b.global(t, dir)+"\n\t}\n}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cli := func(args ...string) (string, string, error) {
				cmd := exec.Command(gateway.Binary(t), append([]string{"credits", "--config", cfg}, args...)...)
				cmd.Dir = dir
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				return strings.TrimSpace(stdout.String()), stderr.String(), err
			}
			ok := func(want string, args ...string) {
				t.Helper()
				out, stderr, err := cli(args...)
				if err != nil || out != want {
					t.Fatalf("credits %q: %q, %v (%s), want %q", args, out, err, stderr, want)
				}
			}
			ok("10", "grant", "acme", "10")
			ok("7", "grant", "acme", "-3")
			ok("5", "grant", "acme", "-2", "--note", "-2 as a note")
			ok("4", "grant", "acme", "--", "-1")

			out, stderr, err := cli("grant", "acme", "-8")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || out != "" {
				t.Fatalf("a debit of 8 from 4: %v, printed %q; want exit status 1", err, out)
			}
			for _, want := range []string{"insufficient credits", "has a balance of 4", "a debit of 8"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("the refused debit says %q; want %q in it", stderr, want)
				}
			}
			ok("4", "balance", "acme")
			ledger, _, err := cli("ledger", "acme", "--json")
			if err != nil || strings.Count(ledger, "\n") != 3 || !strings.Contains(ledger, `"note":"-2 as a note"`) {
				t.Fatalf("ledger after the refusal: %v\n%s", err, ledger)
			}
		})
	}
}
