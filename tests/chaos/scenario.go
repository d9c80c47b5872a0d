package chaos

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// LongEnv selects the long forms: COMFYGATE_CHAOS_LONG=1.
const LongEnv = "COMFYGATE_CHAOS_LONG"

// Long reports whether the long forms were asked for.
func Long() bool { return os.Getenv(LongEnv) != "" }

// Scenario is one fault injected into a running stack under the workload.
type Scenario struct {
	Name string
	// Fault says what is injected, for the table.
	Fault string
	// Gateways is the number of gateway processes (1 when 0).
	Gateways int
	// Warm is the workload before the fault; Hold the fault's length;
	// After the workload after it ends.
	Warm, Hold, After time.Duration
	// Inject starts the fault; it may run until ctx ends (Hold), and
	// Heal ends it (nil: every proxy healed).
	Inject func(ctx context.Context, t *testing.T, s *Stack) error
	Heal   func(t *testing.T, s *Stack) error
	// Open are findings known and not fixed: substrings of finding lines
	// that are reported in the table instead of failing the test, as long
	// as at most OpenLimit findings match each (0: the package's OpenLimit).
	Open      []string
	OpenLimit int
	// RecoverFrom, when set, gives the moment the recovery is timed from
	// instead of the fault's end (a failover's crash, before the promotion
	// that ends the fault).
	RecoverFrom func() time.Time
	// Observed, when set, returns findings the scenario itself made while
	// injecting (beyond the checker's), matched against Open like them.
	Observed func() []string
	// Recovery, when set, gives the time to recover instead of the probe
	// from the fault's end (for faults that heal themselves, timed from
	// the fault's start by the scenario), and a note for the fault column.
	Recovery func() (time.Duration, string)
}

// Result is one scenario's row.
type Result struct {
	Scenario, Fault string
	Report
	// Open counts the findings matched by each of Scenario.Open;
	// Failing lists the others (and the matched ones past OpenLimit).
	Open    map[string]int
	Failing []string
	// Recover is the time from the fault's end to the first request that
	// went through every dependency again (an upload and a list).
	Recover time.Duration
}

var (
	resultsMu sync.Mutex
	results   []Result
)

// Results are the rows of the scenarios run so far.
func Results() []Result {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	return append([]Result(nil), results...)
}

// Run runs sc with the workload and the checker, fails t on any finding
// that sc does not name as open, and keeps the row.
func Run(t *testing.T, sc Scenario, opts StackOptions) Result {
	t.Helper()
	if opts.Gateways == 0 {
		opts.Gateways = max(sc.Gateways, 1)
	}
	s := NewStack(t, opts)
	h := NewHistory()
	SeedPreviousRelease(t, s, h, 8)
	d := NewDriver(s, h)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() { d.Run(ctx, 4); close(done) }()

	time.Sleep(sc.Warm)
	h.SetFault(true)
	fctx, fstop := context.WithTimeout(ctx, sc.Hold)
	injectErr := make(chan error, 1)
	go func() { injectErr <- sc.Inject(fctx, t, s) }()
	<-fctx.Done()
	fstop()
	if err := <-injectErr; err != nil {
		t.Errorf("inject: %v", err)
	}
	heal := sc.Heal
	if heal == nil {
		heal = func(*testing.T, *Stack) error { return s.Faults.HealAll() }
	}
	if err := heal(t, s); err != nil {
		t.Fatalf("heal: %v", err)
	}
	healed := time.Now()
	h.SetFault(false)
	recovered := probe(s, healed.Add(Settle))
	time.Sleep(max(0, sc.After-time.Since(healed)))
	stop()
	<-done

	rep, err := Check(context.Background(), s, h)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Observed != nil {
		rep.Findings = append(rep.Findings, sc.Observed()...)
	}
	res := Result{Scenario: sc.Name, Fault: sc.Fault, Report: rep}
	if recovered.IsZero() {
		res.Findings = append(res.Findings, fmt.Sprintf("no probe went through within %s of the fault's end", Settle))
	} else {
		res.Recover = recovered.Sub(healed)
		if sc.RecoverFrom != nil {
			res.Recover = recovered.Sub(sc.RecoverFrom())
		}
	}
	if sc.Recovery != nil {
		d, note := sc.Recovery()
		res.Recover = d
		if note != "" {
			res.Fault += "; " + note
		}
	}
	res.Open = map[string]int{}
	matched := map[string][]string{}
	for _, f := range res.Findings {
		if o, ok := matchAny(f, sc.Open); ok {
			matched[o] = append(matched[o], f)
		} else {
			res.Failing = append(res.Failing, f)
		}
	}
	limit := sc.OpenLimit
	if limit == 0 {
		limit = OpenLimit
	}
	for o, fs := range matched {
		if len(fs) > limit {
			res.Failing = append(res.Failing, fs...)
			continue
		}
		res.Open[o] = len(fs)
		for _, f := range fs {
			t.Logf("open finding: %s", f)
		}
	}
	failing := res.Failing
	t.Logf("%s: %d requests, codes %v, lost %d, duplicated %d, recovered in %s, open %d",
		sc.Name, rep.Requests, rep.Codes, rep.Lost, rep.Duplicated, res.Recover.Round(10*time.Millisecond), len(res.Open))
	for _, f := range failing {
		t.Errorf("finding: %s", f)
	}
	if t.Failed() {
		path := filepath.Join(os.TempDir(), "chaos-history-"+strings.ReplaceAll(sc.Name, " ", "-")+".json")
		if os.WriteFile(path, h.JSON(), 0o600) == nil {
			t.Logf("history: %s", path)
		}
	}
	resultsMu.Lock()
	results = append(results, res)
	resultsMu.Unlock()
	return res
}

// OpenLimit is how many findings one open pattern may match in a
// scenario before they fail it: an open finding is rare, a flood of them
// is a regression.
const OpenLimit = 5

func matchAny(f string, open []string) (string, bool) {
	for _, o := range open {
		if strings.Contains(f, o) {
			return o, true
		}
	}
	return "", false
}

// probe repeats an upload and a job list on the first gateway until both
// answer 2xx, returning when (zero if not before deadline).
func probe(s *Stack, deadline time.Time) time.Time {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for time.Now().Before(deadline) {
		if probeOnce(client, s.Gateways[0].URL) {
			return time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}
}

func probeOnce(client *http.Client, base string) bool {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("content_type", "text/plain")
	_ = mw.WriteField("file_path", "probe.txt")
	part, _ := mw.CreateFormFile("file", "probe.txt")
	part.Write([]byte("probe " + uuid.NewString()))
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v2/assets", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Idempotency-Key", "probe-"+uuid.NewString())
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return false
	}
	resp, err = client.Get(base + "/api/v2/jobs?limit=1")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// tableHead is the head of RELIABILITY.md's table.
const tableHead = "| scenario | injected | requests | answers by code | lost | duplicated | open findings | time to recover |\n" +
	"|---|---|---|---|---|---|---|---|\n"

// Table is RELIABILITY.md's table of results.
func Table(rs []Result) string {
	var b strings.Builder
	b.WriteString(tableHead)
	for _, r := range rs {
		b.WriteString(row(r))
	}
	return b.String()
}

// row is one result's line of the table.
func row(r Result) string {
	var codes []string
	for c, n := range r.Codes {
		codes = append(codes, fmt.Sprintf("%s: %d", c, n))
	}
	sort.Strings(codes)
	var notes []string
	for o, n := range r.Open {
		notes = append(notes, fmt.Sprintf("open, %d × %s", n, o))
	}
	sort.Strings(notes)
	for i, f := range r.Failing {
		if i == 3 {
			notes = append(notes, fmt.Sprintf("and %d more failing", len(r.Failing)-3))
			break
		}
		notes = append(notes, "FAILING: "+f)
	}
	open := "none"
	if len(notes) > 0 {
		open = strings.ReplaceAll(strings.Join(notes, "; "), "|", "/")
	}
	return fmt.Sprintf("| %s | %s | %d | %s | %d | %d | %s | %s |\n", r.Scenario, r.Fault, r.Requests,
		strings.Join(codes, ", "), r.Lost, r.Duplicated, open, r.Recover.Round(10*time.Millisecond))
}

// TableRows are the scenario lines of a RELIABILITY.md's table, in order.
func TableRows(md string) []string {
	_, rest, ok := strings.Cut(md, tableHead)
	if !ok {
		return nil
	}
	var rows []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		rows = append(rows, line+"\n")
	}
	return rows
}

// rowScenario is the scenario named by a table line.
func rowScenario(line string) string {
	cells := strings.SplitN(line, " | ", 2)
	return strings.TrimPrefix(cells[0], "| ")
}

// mergeTable is the table of rs, with the rows of lastRows (a previous
// report's) whose scenarios did not run this time kept where they were,
// and the names of those carried over.
func mergeTable(rs []Result, lastRows []string) (string, []string) {
	ran := map[string]Result{}
	for _, r := range rs {
		ran[r.Scenario] = r
	}
	var b strings.Builder
	var carried []string
	b.WriteString(tableHead)
	written := map[string]bool{}
	for _, line := range lastRows {
		name := rowScenario(line)
		if r, ok := ran[name]; ok {
			b.WriteString(row(r))
			written[name] = true
			continue
		}
		b.WriteString(line)
		carried = append(carried, name)
	}
	for _, r := range rs {
		if !written[r.Scenario] {
			b.WriteString(row(r))
		}
	}
	return b.String(), carried
}
