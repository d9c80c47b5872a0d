package chaos

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/tests/gateway"
)

// resubmit sends n submissions twice each with the same key, one after
// the other, recording both answers: a correct gateway answers the
// second with idempotency_key_reuse.
func resubmit(ctx context.Context, d *Driver, n int) {
	for range n {
		logical := "job-" + uuid.NewString()
		key := "k-" + logical
		for a := 1; a <= 2; a++ {
			e := d.do(ctx, Entry{Op: OpSubmit, Logical: logical, Key: key, Attempt: a}, http.MethodPost, "/api/v2/jobs",
				bytes.NewReader(SubmitWorkflow(logical)), map[string]string{"Content-Type": "application/json", "Idempotency-Key": key})
			d.H.Add(e)
		}
	}
}

// TestCheckerCatchesSkippedClaim: the checker is shown to catch what it
// claims. A gateway built with -tags chaosbroken (it takes no idempotency
// claim and records no key) creates a second job for a key already used;
// the checker must report it as duplicated, from the history and from
// storage. The real binary, under the same requests, must come out clean.
func TestCheckerCatchesSkippedClaim(t *testing.T) {
	sideBySide(t)
	broken := filepath.Join(t.TempDir(), "comfygate-broken")
	cmd := exec.Command("go", "build", "-tags", "chaosbroken", "-o", broken, "./cmd/comfygate")
	cmd.Dir = gateway.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the broken gateway: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name   string
		binary string
		broken bool
	}{{"real", "", false}, {"broken", broken, true}} {
		t.Run(c.name, func(t *testing.T) {
			s := NewStack(t, StackOptions{Binary: c.binary})
			h := NewHistory()
			d := NewDriver(s, h)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			resubmit(ctx, d, 5)
			d.Run(ctx, 2)
			rep, err := Check(context.Background(), s, h)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d requests, codes %v, lost %d, duplicated %d, findings %q", c.name, rep.Requests, rep.Codes, rep.Lost, rep.Duplicated, rep.Findings)
			switch {
			case c.broken && rep.Duplicated < 5:
				t.Errorf("broken build: checker found %d duplicated, want at least the 5 resubmissions", rep.Duplicated)
			case !c.broken && (rep.Duplicated != 0 || rep.Lost != 0 || len(rep.Findings) != 0):
				t.Errorf("real build: checker found %d duplicated, %d lost, findings %q", rep.Duplicated, rep.Lost, rep.Findings)
			}
			if c.broken {
				storage := 0
				for _, f := range rep.Findings {
					if bytes.Contains([]byte(f), []byte("jobs in storage")) {
						storage++
					}
				}
				if storage < 5 {
					t.Errorf("broken build: %d storage duplicates found, want at least 5: %q", storage, rep.Findings)
				}
			}
		})
	}
}

// TestCheckerCatchesLostAndOrphanObjects: the blob check is shown to catch
// what it claims, on a bucket of both layouts. After a short workload, a
// seeded object (the previous release's layout) and an object at a key
// (this release's) are removed behind the gateway's back, and an object
// neither layout names is put in the bucket, where no sweeper looks: the
// checker must count the two lost (their rows, and the seed's read) and
// report the stray object.
func TestCheckerCatchesLostAndOrphanObjects(t *testing.T) {
	sideBySide(t)
	s := NewStack(t, StackOptions{})
	h := NewHistory()
	SeedPreviousRelease(t, s, h, 8) // the workload deletes some
	d := NewDriver(s, h)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d.Run(ctx, 2)
	bg := context.Background()
	// A seed the workload has not deleted (it deletes some), whose row
	// still names its object at the content address.
	var hx string
	conn, err := pgx.Connect(bg, s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	for _, seed := range h.Seeds() {
		hash := hashOf(seed.Data)
		var alive bool
		if err := conn.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM assets WHERE id = $1)
			AND EXISTS (SELECT 1 FROM blobs WHERE hash = $2 AND object_key IS NULL)`, seed.ID, hash).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if alive {
			hx = strings.TrimPrefix(hash, "blake3:")
			break
		}
	}
	if hx == "" {
		t.Fatal("the workload deleted every seed")
	}
	// An object at a key that a live row names (the workload deletes some,
	// and an aborted create can leave one no row names).
	keyed := ""
	if err := conn.QueryRow(bg, `SELECT coalesce(max(object_key), '') FROM blobs
		WHERE object_key LIKE 'blobs/%' AND refs > 0`).Scan(&keyed); err != nil {
		t.Fatal(err)
	}
	if keyed == "" {
		t.Fatal("the workload put no object at a key")
	}
	for _, key := range []string{"objects/" + hx[0:2] + "/" + hx[2:4] + "/" + hx, keyed} {
		if err := s.BucketClient.RemoveObject(bg, s.Bucket.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.BucketClient.PutObject(bg, s.Bucket.Bucket, "stray/x", strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(bg, s, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lost %d, findings %q", rep.Lost, rep.Findings)
	var missingRows, stray bool
	for _, f := range rep.Findings {
		missingRows = missingRows || strings.HasPrefix(f, "2 blob rows whose object is missing")
		stray = stray || strings.Contains(f, "that no blob row names (e.g. stray/x)")
	}
	if rep.Lost < 3 || !missingRows || !stray {
		t.Errorf("the checker found lost %d, missing rows %v, the stray object %v; want at least 3, true, true", rep.Lost, missingRows, stray)
	}
}
