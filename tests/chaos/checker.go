package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/internal/router/limits"
)

// Report is what the checker found in one history.
type Report struct {
	// Requests counts every request; Codes the answers by status and
	// code ("201", "500 upstream_error", "conn" for no answer).
	Requests int
	Codes    map[string]int
	// Lost counts effects answered 2xx that storage does not hold (or
	// holds with other bytes), and keys refused as used with nothing
	// created under them; Duplicated counts intentions that created more
	// than one job or asset, or ran twice.
	Lost, Duplicated int
	// Findings say what else broke the contract, one line each.
	Findings []string
}

func (r *Report) find(format string, a ...any) {
	r.Findings = append(r.Findings, fmt.Sprintf(format, a...))
}

// Settle is how long the checker waits, after the faults ended, for
// every job to be terminal and every router reservation to be returned:
// a lease for the takeover, the jobs' own run time and a margin.
const Settle = 3*Lease + 15*time.Second

// Check verifies the history against storage. It waits (at most Settle)
// for the jobs to finish and the reservations to return first.
func Check(ctx context.Context, s *Stack, h *History) (Report, error) {
	r := Report{Codes: map[string]int{}}
	entries := h.Entries()
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return r, fmt.Errorf("checker: postgres: %w", err)
	}
	defer conn.Close(context.Background())

	checkAnswers(&r, entries)
	jobIDs := checkCreations(&r, entries)
	if err := checkJobsStorage(ctx, &r, conn, entries, jobIDs); err != nil {
		return r, err
	}
	if err := checkAssets(ctx, &r, s, conn, h, entries); err != nil {
		return r, err
	}
	checkTerminal(&r, entries)
	if err := checkReservations(ctx, &r, s); err != nil {
		return r, err
	}
	if err := runSweepers(ctx, s); err != nil {
		return r, err
	}
	if err := checkBlobs(ctx, &r, s, conn); err != nil {
		return r, err
	}
	return r, nil
}

// checkAnswers counts the answers and checks that each is the contract's:
// an envelope on every v2 error, X-Service-Error-Type on every router
// error, 5xx only as upstream_error on v2, and no request past HangBound.
func checkAnswers(r *Report, entries []Entry) {
	for _, e := range entries {
		r.Requests++
		label := fmt.Sprint(e.Status)
		if e.Status == 0 {
			label = "conn"
		} else if e.Code != "" {
			label += " " + e.Code
		}
		r.Codes[label]++
		if e.Op != OpEvents && e.End.Sub(e.Start) > HangBound {
			r.find("%s %s took %s (bound %s): a hang", e.Op, e.Logical, e.End.Sub(e.Start).Round(time.Second), HangBound)
		}
		if e.Status == 0 && strings.Contains(e.Err, "Timeout") {
			r.find("%s %s: no answer: %s", e.Op, e.Logical, e.Err)
		}
		if e.Status >= 400 && !e.Enveloped {
			r.find("%s %s: %d without the contract's error envelope", e.Op, e.Logical, e.Status)
		}
		if e.Op != OpRoute && e.Status >= 500 && e.Code != "upstream_error" {
			r.find("%s %s: %d %q, want 500/503 upstream_error", e.Op, e.Logical, e.Status, e.Code)
		}
	}
}

// checkCreations checks that every intention's 2xx answers name one id,
// and returns the ids of the jobs answered 2xx.
func checkCreations(r *Report, entries []Entry) map[string]bool {
	ids := map[string]map[string]bool{}
	jobs := map[string]bool{}
	for _, e := range entries {
		if (e.Op != OpSubmit && e.Op != OpUpload) || !e.OK() || e.ID == "" {
			continue
		}
		if ids[e.Logical] == nil {
			ids[e.Logical] = map[string]bool{}
		}
		ids[e.Logical][e.ID] = true
		if e.Op == OpSubmit {
			jobs[e.ID] = true
		}
	}
	for logical, set := range ids {
		if len(set) > 1 {
			r.Duplicated++
			r.find("%s was answered with %d different ids", logical, len(set))
		}
	}
	return jobs
}

// intentions groups the history by logical intention.
func intentions(entries []Entry, op Op) map[string][]Entry {
	m := map[string][]Entry{}
	for _, e := range entries {
		if e.Op == op {
			m[e.Logical] = append(m[e.Logical], e)
		}
	}
	return m
}

// checkJobsStorage: every keyed submission is at most one job in storage,
// every job answered 2xx exists, a key refused as used names a job, and
// every job is terminal within Settle.
func checkJobsStorage(ctx context.Context, r *Report, conn *pgx.Conn, entries []Entry, answered map[string]bool) error {
	for logical, es := range intentions(entries, OpSubmit) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE workflow::text LIKE '%' || $1 || '%'`, logical).Scan(&n); err != nil {
			return fmt.Errorf("checker: counting jobs: %w", err)
		}
		keyed, ok, reused := es[0].Key != "", false, false
		for _, e := range es {
			ok = ok || e.OK()
			reused = reused || e.Code == "idempotency_key_reuse"
		}
		if keyed && n > 1 {
			r.Duplicated++
			r.find("submission %s (one key) is %d jobs in storage", logical, n)
		}
		if keyed && reused && !ok && n == 0 {
			r.Lost++
			r.find("submission %s: its key was refused as used, but no job holds it", logical)
		}
	}
	for id := range answered {
		var status string
		if err := conn.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, id).Scan(&status); err != nil {
			r.Lost++
			r.find("job %s was answered 2xx but storage has none: %v", id, err)
			delete(answered, id)
		}
	}
	deadline := time.Now().Add(Settle)
	for {
		stuck, err := nonTerminal(ctx, conn, answered)
		if err != nil {
			return err
		}
		if len(stuck) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			r.find("%d jobs not terminal %s after the faults ended (e.g. %s)", len(stuck), Settle, stuck[0])
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func nonTerminal(ctx context.Context, conn *pgx.Conn, ids map[string]bool) ([]string, error) {
	var list []string
	for id := range ids {
		list = append(list, id)
	}
	rows, err := conn.Query(ctx, `SELECT id::text || ' ' || status FROM jobs WHERE id::text = ANY($1)
		AND status NOT IN ('succeeded', 'failed', 'canceled', 'expired')`, list)
	if err != nil {
		return nil, fmt.Errorf("checker: job states: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// checkAssets: every asset answered 2xx (and every seed) that no delete
// answered 2xx or 404 is readable with the bytes sent; one that was
// deleted is gone; a keyed upload is at most one asset, and a key refused
// as used names one.
func checkAssets(ctx context.Context, r *Report, s *Stack, conn *pgx.Conn, h *History, entries []Entry) error {
	client := &http.Client{Timeout: 20 * time.Second}
	deleted, tried := map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		if e.Op == OpDelete {
			tried[e.ID] = true
			deleted[e.ID] = deleted[e.ID] || e.OK() || e.Status == http.StatusNotFound
		}
	}
	check := func(id, what string, want []byte) error {
		resp, err := client.Get(s.Gateways[0].URL + "/api/v2/assets/" + id + "/content")
		if err != nil {
			return fmt.Errorf("checker: reading asset %s: %w", id, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case deleted[id] && resp.StatusCode != http.StatusNotFound:
			r.find("asset %s of %s: %d after a delete answered it, want 404", id, what, resp.StatusCode)
		case deleted[id], tried[id] && resp.StatusCode == http.StatusNotFound:
			// Gone, or a delete whose answer was lost went through.
		case resp.StatusCode != http.StatusOK || !bytes.Equal(b, want):
			r.Lost++
			r.find("asset %s of %s: %d with %d bytes, want 200 with the %d sent", id, what, resp.StatusCode, len(b), len(want))
		}
		return nil
	}
	for _, seed := range h.Seeds() {
		if err := check(seed.ID, "the seed", seed.Data); err != nil {
			return err
		}
	}
	for logical, es := range intentions(entries, OpUpload) {
		ok, reused := false, false
		ids := map[string]bool{}
		for _, e := range es {
			if e.OK() && e.ID != "" {
				ok, ids[e.ID] = true, true
			}
			reused = reused || e.Code == "idempotency_key_reuse"
		}
		for id := range ids {
			if err := check(id, logical, h.UploadData(logical)); err != nil {
				return err
			}
		}
		if es[0].Key != "" && reused && !ok {
			// The attempt that holds the key may have finished after its
			// client gave up: then the asset exists and nothing is lost.
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM assets WHERE idempotency_key = $1`, es[0].Key).Scan(&n); err != nil {
				return fmt.Errorf("checker: counting assets: %w", err)
			}
			if n == 0 {
				r.Lost++
				r.find("upload %s: its key was refused as used, but no asset holds it", logical)
			}
		}
	}
	return nil
}

// checkTerminal: once a job was seen terminal, every observation that
// started after that answer (polls, cancels, streams) shows the same status.
func checkTerminal(r *Report, entries []Entry) {
	type seen struct {
		status     string
		start, end time.Time
	}
	byJob := map[string][]seen{}
	for _, e := range entries {
		if !e.OK() {
			continue
		}
		switch e.Op {
		case OpPoll, OpCancel:
			if e.JobStatus != "" {
				byJob[e.Logical] = append(byJob[e.Logical], seen{e.JobStatus, e.Start, e.End})
			}
		case OpEvents:
			for _, st := range e.Statuses {
				byJob[e.Logical] = append(byJob[e.Logical], seen{st, e.Start, e.End})
			}
		}
	}
	for id, obs := range byJob {
	next:
		for _, t := range obs {
			if !terminal(t.status) {
				continue
			}
			for _, o := range obs {
				if o.start.After(t.end) && o.status != t.status {
					r.find("job %s was %s, then %s at %s", id, t.status, o.status, o.end.Format(time.StampMilli))
					break next
				}
			}
		}
	}
}

func terminal(s string) bool {
	return s == "succeeded" || s == "failed" || s == "canceled" || s == "expired"
}

// checkReservations waits for the router's leases and reserved cents to
// return to zero.
func checkReservations(ctx context.Context, r *Report, s *Stack) error {
	l, err := limits.OpenRedis(s.RedisURL, s.RouterPrefix, 0)
	if err != nil {
		return fmt.Errorf("checker: limiter: %w", err)
	}
	defer l.Close()
	deadline := time.Now().Add(Settle)
	for {
		n, cents, err := l.Inspect(ctx, s.Workspace)
		if err == nil && n == 0 && cents == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			r.find("router reservations not returned %s after the faults: %d calls, %d cents (%v)", Settle, n, cents, err)
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkBlobs: after the sweepers, the bucket holds exactly the objects the
// blob rows name, of both layouts (a row's object_key, or the hash's
// address objects/ab/cd/<hex> when it has none): an object no row names is
// an orphan, a row whose object is missing lost bytes. And no multipart
// upload is left open.
func checkBlobs(ctx context.Context, r *Report, s *Stack, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT hash, coalesce(object_key, '') FROM blobs`)
	if err != nil {
		return fmt.Errorf("checker: blobs: %w", err)
	}
	named := map[string]string{} // object key → hash
	for rows.Next() {
		var hash, key string
		if err := rows.Scan(&hash, &key); err != nil {
			rows.Close()
			return fmt.Errorf("checker: blobs: %w", err)
		}
		if key == "" {
			hx := strings.TrimPrefix(hash, "blake3:")
			key = "objects/" + hx[0:2] + "/" + hx[2:4] + "/" + hx
		}
		named[key] = hash
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checker: blobs: %w", err)
	}
	client := s.BucketClient
	var orphans []string
	present := map[string]bool{}
	for obj := range client.ListObjects(ctx, s.Bucket.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("checker: listing the bucket: %w", obj.Err)
		}
		present[obj.Key] = true
		if _, ok := named[obj.Key]; !ok {
			orphans = append(orphans, obj.Key)
		}
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		r.find("%d objects in the bucket that no blob row names (e.g. %s)", len(orphans), orphans[0])
	}
	var missing []string
	for key, hash := range named {
		if !present[key] {
			missing = append(missing, hash+" at "+key)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		r.Lost += len(missing)
		r.find("%d blob rows whose object is missing (e.g. %s)", len(missing), missing[0])
	}
	n := 0
	for u := range client.ListIncompleteUploads(ctx, s.Bucket.Bucket, "", true) {
		if u.Err == nil {
			n++
		}
	}
	if n > 0 {
		r.find("%d multipart uploads left open in the bucket", n)
	}
	return nil
}
