package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/comfygate/comfygate/storage/pgtest"
)

type jobState struct {
	Status    string  `json:"status"`
	CreatedAt string  `json:"created_at"`
	StartedAt *string `json:"started_at"`
}

func getJob(client *http.Client, u string) (jobState, error) {
	resp, err := client.Get(u)
	if err != nil {
		return jobState{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return jobState{}, fmt.Errorf("GET %s: %d %s %v", u, resp.StatusCode, b, err)
	}
	var j jobState
	return j, json.Unmarshal(b, &j)
}

// TestBenchQueuedToRunning: time from submit to running on an idle builtin
// pool (embedded storage), over sequential submits of EmptyImage 8×8 →
// SaveImage, by the job's own started_at − created_at and by polling every
// millisecond. Lower bound, same run: one bare SQLite write with the
// embedded store's settings (and one bare pgx write for reference).
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchQueuedToRunning ./tests/bench/
func TestBenchQueuedToRunning(t *testing.T) {
	requireBench(t)
	n := envInt("COMFYGATE_BENCH_JOBS", 200)
	g, _ := startGateway(t, "storage embedded ./data")
	client := benchClient(4)
	body := []byte(`{"workflow":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}},` +
		`"2":{"class_type":"SaveImage","inputs":{"filename_prefix":"bench","images":["1",0]}}}}`)
	quiet(t)
	var byStamps, byPolling []time.Duration
	for i := 0; i < n; i++ {
		sent := time.Now()
		code, b, err := post(client, g.URL+"/api/v2/jobs", body)
		if err != nil || code != http.StatusCreated {
			t.Fatalf("submit: %d %s %v", code, b, err)
		}
		var j struct{ ID string }
		json.Unmarshal(b, &j)
		u := g.URL + "/api/v2/jobs/" + j.ID
		seen := false
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := getJob(client, u)
			if err != nil {
				t.Fatal(err)
			}
			if !seen && st.Status != "queued" {
				byPolling = append(byPolling, time.Since(sent))
				seen = true
			}
			if st.Status == "succeeded" || st.Status == "failed" {
				if st.Status == "failed" || st.StartedAt == nil {
					t.Fatalf("job ended %s (started_at %v)", st.Status, st.StartedAt)
				}
				c, _ := time.Parse(time.RFC3339Nano, st.CreatedAt)
				s, _ := time.Parse(time.RFC3339Nano, *st.StartedAt)
				byStamps = append(byStamps, s.Sub(c))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still %s", j.ID, st.Status)
			}
			time.Sleep(time.Millisecond)
		}
	}
	sqliteLat := sqliteWrites(t, n)
	pgLat := pgxWrites(t, n)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nqueued → running, %d sequential jobs on an idle builtin pool (embedded)\n", n)
	sb.WriteString("| measure | p50 | p90 | p99 | max |\n")
	row := func(name string, xs []time.Duration) {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s |\n", name, ms(Percentile(xs, 50)), ms(Percentile(xs, 90)),
			ms(Percentile(xs, 99)), ms(Percentile(xs, 100)))
	}
	row("started_at − created_at", byStamps)
	row("submit sent → first poll not queued (1 ms polls)", byPolling)
	row("bare SQLite insert, WAL, synchronous=NORMAL", sqliteLat)
	row("bare pgx insert, autocommit (reference)", pgLat)
	t.Log(sb.String())
}

// sqliteWrites times n single-row autocommit inserts into a fresh database
// with the embedded store's pragmas.
func sqliteWrites(t *testing.T, n int) []time.Duration {
	t.Helper()
	q := url.Values{}
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "bench.db"), RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL, workflow TEXT NOT NULL, created_at TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := db.Exec(`INSERT INTO jobs VALUES (?, 'queued', ?, ?)`, uuid.NewString(), `{"1":{}}`, start.String()); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}

// pgxWrites times n single-row autocommit inserts on one connection.
func pgxWrites(t *testing.T, n int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE w (id uuid PRIMARY KEY, workflow json NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := conn.Exec(ctx, `INSERT INTO w (id, workflow) VALUES ($1, $2::text::json)`, uuid.NewString(), `{"1":{}}`); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}
