package chaos

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// LongCommand is the one command that runs the long forms and writes
// RELIABILITY.md (see tests/chaos/long).
const LongCommand = "tests/chaos/long"

// openNotes are findings outside the scenarios' table, kept open.
var openNotes = []string{
	"\"its key was refused as used, but no job holds it\": a create whose Postgres connection died after the statement " +
		"or COMMIT was written has an unknown outcome at first. The store now learns it (storage/postgres/indoubt.go, " +
		"TestCreateInDoubt): once the broken connection's backend is gone (or on the promoted standby) it looks the row " +
		"up by the id the gateway chose: committed → answered as a success; absent → storage.ErrNotCommitted, the key is " +
		"released and the retry runs. It stays open for what that cannot settle within its 10 s bound: no primary " +
		"answers for longer (the long Postgres-down scenario refuses connections for 30 s), or the old backend still " +
		"waits (for a synchronous standby that is gone); then the gateway keeps the Idempotency-Key, as the contract " +
		"says, and a retry is answered 422 idempotency_key_reuse with no job to poll. A create that never reached the " +
		"server releases the key (storage.ErrNotSent, idem.NotSent).",
	"Postgres failover, asynchronous: by design, not a defect. The commits the standby had not received when the " +
		"primary crashed are gone from the promoted standby: creates answered 201 are missing, deletes answered 204 are " +
		"undone, and a delete's removal of the bytes from the object store (which follows its commit on the old primary, " +
		"and which the promotion cannot undo) leaves a blob row naming a missing object. Synchronous replication " +
		"(docs/postgres-ha.md) loses none of them.",
	"Rolling upgrade across 0010: until the last gateway of the release before 0010 is replaced, an asset uploaded " +
		"through a current gateway reads as 404 blob_not_found through an old one (it reads blobs at their content address " +
		"only; the current release leaves an upload where it was streamed). The bytes are kept and every upgraded gateway " +
		"reads them. Closing it needs the current release to write at the content address while previous-release " +
		"gateways may run (for example a setting for the duration of the roll).",
}

// faultMatrixSection says what the storage fault matrix covers and found;
// its per-write results are generated beside this report.
const faultMatrixSection = `## Every write under every fault

The scenarios above fault the dependencies while a workload runs, so they find what their faults happen to hit.
The fault matrix (storage/storetest/faults.go, part of tests/run) walks every step instead: each of 27 write
methods of the store (asset create at a key, at a declared address, over held bytes and from a hash; delete of the
last and of a shared reference; the retention, unreferenced-bytes and orphan sweeps; job create alone, priced and
in a batch; claim over earlier outputs; output commit; finish; release; cancel; credit grant, reserve and settle;
router call create, update and record; deployment create, state and delete), each statement it sends and its
COMMIT, each failed three ways: refused by the database, lost before it reached it, or run with its answer lost.
After every run it checks that every record has its bytes, an acknowledged write is wholly there, one answered as
having had no effect (the idempotency key is then released) is wholly absent, nothing is half done, a create known
not to have committed has already retracted its object, and one maintenance pass leaves no bytes that no record
names. Postgres runs it through a wire-protocol proxy (storage/pgtest/pgfault: real server errors and real cut
connections, so pgx answers as in production), 336 runs; the embedded store through a database/sql driver between
the store and SQLite, 570 runs; together about 15 s of tests/run. Every invariant holds in every run; the results,
write by write and fault point by fault point, are in docs/reliability/fault-matrix-postgres.md and
docs/reliability/fault-matrix-embedded.md. On the code before issue 37 it failed 30 runs: 22 left an asset without
its bytes (delete, retention, claim; both stores), and 8 commits whose answer was lost were labelled
ErrNotSent ("never reached the database") although they had committed (delete, cancel, finish, claim, output
commit, router call).

5xx per failover, measured: the rows above count them under "answers by code" (one long-form run each). Measured
again for issue 37 with the short forms in tests/run, three runs each: see docs/redis-ha.md.
`

// fixedNotes are findings of the suite that were fixed, and where.
var fixedNotes = []string{
	"Slowloris bodies: Caddy reads a trickled request body for as long as the client keeps trickling unless " +
		"`servers { timeouts { read_body … } }` is set, and no example set it (a bound on the whole body also cuts " +
		"large uploads over slow links). Fixed: `comfy_auth` bounds every body's rate (`min_body_rate`, default 1 KiB/s " +
		"after a 30 s grace, stalls of 30 s: 408 `request_timeout`). TestHostileInputs now runs without read_body, and " +
		"its 20 trickled uploads are cut at the grace; with `min_body_rate off` they are still being read when the test " +
		"gives up.",
	"Bytes removed before the COMMIT that dropped their last reference (issue 37): a delete, the retention sweep and " +
		"a claim dropping an earlier attempt's outputs removed the object inside the transaction, so a COMMIT that then " +
		"failed (a deferred constraint, a failover, a gateway killed between the two: TestGatewayKill9 tripped on it by " +
		"chance) left the asset answering 200 and its content 404 blob_not_found. Fixed: the row stays with refs 0 and " +
		"the bytes go after the commit, or, when that does not happen, on the next maintenance pass " +
		"(RemoveUnreferencedBlobs; storage/postgres/unreferenced.go). A COMMIT whose answer was lost is " +
		"storage.ErrInDoubt, no longer ErrNotSent. Found again, with eight mislabelled commits, by the fault matrix (the section above); " +
		"TestDeleteWhoseCommitFailsKeepsBytes is the reproduction through the gateway.",
	"Idempotency-Key of a create whose commit was in flight when its Postgres connection died: kept, so the client's " +
		"retry got 422 idempotency_key_reuse with nothing created (about one per long synchronous-failover run), or " +
		"released although the create had committed (pgx answers a COMMIT whose connection broke after it was written " +
		"with \"conn closed\", which it marks safe to retry). Fixed: the store learns the outcome on another connection " +
		"once the original backend is gone (storage/postgres/indoubt.go, TestCreateInDoubt): committed → success, " +
		"absent → storage.ErrNotCommitted (key released).",
	"Redis Cluster: after a primary was killed, the gateways kept dialing it for its slots until go-redis's next " +
		"periodic slot-map reload (once a minute; it re-reads the map by itself only on MOVED/ASK), long after its " +
		"replica had taken the slots over: every claim, limit and publish on those slots failed meanwhile. Fixed: " +
		"comfygate's Cluster client re-reads the slot map when a node stops answering (storage/redisconn; " +
		"TestClusterClientFollowsFailover).",
	"Idempotency-Key kept after a write that never reached Postgres (no connection could be made): the client's retry " +
		"got 422 idempotency_key_reuse with no job to poll (16–30 per Postgres-down run). Fixed: storage.ErrNotSent, " +
		"idem.NotSent release the key.",
	"Idempotency-Key kept after an upload whose bytes the blob store could not publish (seen once the S3 timeout " +
		"turned S3-silence hangs into 500s: 11 retries per S3-blackhole run got 422 with no asset). The create's " +
		"transaction is rolled back before its commit, so nothing was created. Fixed: storage.ErrNotCommitted, which " +
		"idem.NotSent releases.",
	"S3 silence held uploads: the S3 client waited up to a minute per attempt and retried, so an upload was held as " +
		"long as the store was silent, past the 25 s bound. Fixed: `blobs s3 { timeout }` (default 10 s; the stack sets " +
		"2 s) fails a request that makes no progress.",
	"Orphan objects: a blob is published inside the transaction that records it, so a commit that fails after the " +
		"publish left an object no blob row names, and nothing removed it. Fixed: the maintenance pass walks the store " +
		"and removes such objects under the blob row's lock (storage RemoveOrphanBlobs); the checker runs the sweepers " +
		"before it looks at the bucket.",
}

// SoakSection is the body of the soak section of a RELIABILITY.md, or "".
func SoakSection(md string) string {
	_, rest, ok := strings.Cut(md, "\n## Soak\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	if carried, after, ok := strings.Cut(body, carriedMark); ok {
		_, body, _ = strings.Cut(carried+after, "\n\n") // drop the previous carry note
	}
	return strings.TrimSpace(body)
}

// carriedMark starts the note on a soak section carried over.
const carriedMark = "The soak did not run this time"

// Markdown is RELIABILITY.md: how it was produced, the scenarios' table
// (with lastRows, the last report's rows, kept for the scenarios that did
// not run this time), the soak (when it ran, else lastSoak: the section of
// the last report that ran it, carried over as it was) and the open
// findings outside the table.
func Markdown(rs []Result, lastRows []string, soak *SoakResult, lastSoak string, long bool, started time.Time) string {
	var b strings.Builder
	form := "short forms (as in tests/run)"
	if long {
		form = "long forms"
	}
	fmt.Fprintf(&b, "# Reliability\n\nGenerated by `%s` (the %s of tests/chaos) on %s, %d CPUs; not edited by hand. "+
		"Each scenario runs the mixed workload (uploads with and without Idempotency-Key, submits retried on the same key, "+
		"cancels, polls, event streams, router calls with keys) against the real gateway binary, whose every dependency "+
		"(Postgres, Redis, the S3 server, two ComfyUI peers, a partner peer) is behind a toxiproxy proxy; the fault is "+
		"injected through the proxies (the Redis Sentinel and Cluster rows instead reach Redis nodes of their own directly "+
		"and kill one), then the checker verifies the history against storage "+
		"(see tests/chaos/checker.go for what it checks).\n\n", LongCommand, form, started.UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU())
	b.WriteString("\"lost\" counts effects answered 2xx that storage does not hold with the right bytes, and keys refused as " +
		"used with nothing created under them; \"duplicated\" counts intentions that became more than one job or asset. " +
		"\"conn\" is a request that got no answer (a killed gateway). Time to recover runs from the fault's end to the " +
		"first upload and job list that both succeed.\n\n")
	table, carried := mergeTable(rs, lastRows)
	if len(carried) > 0 {
		fmt.Fprintf(&b, "Not run this time, so carried over unchanged from the last report: %s.\n\n", strings.Join(carried, ", "))
	}
	b.WriteString(table)
	b.WriteString("\nAn open finding is reported, not failed, while at most " + fmt.Sprint(OpenLimit) + " findings of its kind " +
		"occur in a scenario; the open kinds are explained below.\n")
	if soak != nil {
		fmt.Fprintf(&b, "\n## Soak\n\n%s of the workload at a fixed moderate rate (two clients, 250 ms between requests) "+
			"against one gateway, no faults, sampled every %s: %d requests, answers %v; checker: %d lost, %d duplicated, %d findings.\n\n",
			soak.Length, soak.Interval, soak.Requests, soak.Report.Codes, soak.Report.Lost, soak.Report.Duplicated, len(soak.Report.Findings))
		fmt.Fprintf(&b, "![soak](%s)\n\n", soak.Plot)
		b.WriteString("| series | after warm-up (2nd quarter mean) | last quarter mean |\n|---|---|---|\n")
		n := len(soak.Samples)
		for i, name := range Series {
			mean := func(from, to int) float64 {
				var s float64
				for _, x := range soak.Samples[from:to] {
					s += x.values()[i]
				}
				return s / float64(max(to-from, 1))
			}
			fmt.Fprintf(&b, "| %s | %.1f | %.1f |\n", name, mean(n/4, n/2), mean(3*n/4, n))
		}
		if len(soak.Grew) == 0 {
			b.WriteString("\nNo series grew after warm-up beyond noise (20 % of its warm level plus a small absolute slack). " +
				"Idempotency claims (24 h in Redis by design) are counted apart, in the CSV beside the plot.\n")
		} else {
			fmt.Fprintf(&b, "\nOpen finding: %s.\n", strings.Join(soak.Grew, "; "))
		}
	}
	if soak == nil && lastSoak != "" {
		b.WriteString("\n## Soak\n\n" + carriedMark + " (" + SoakEnv + "=0): the section below is the last soak's, " +
			"carried over unchanged from the report that ran it.\n\n" + lastSoak + "\n")
	}
	b.WriteString("\n" + faultMatrixSection)
	b.WriteString("\n## Open findings outside the table\n\n")
	for _, n := range openNotes {
		b.WriteString("- " + n + "\n")
	}
	b.WriteString("\n## Findings fixed\n\n")
	for _, n := range fixedNotes {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}
