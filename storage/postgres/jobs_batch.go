package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/internal/combine"
)

// Concurrent CreateJobs are written together (package combine): while
// createInflight statements are running, new creates wait and go out in the
// next one, as one multi-row INSERT (createBatchSQL). A lone create goes out
// at once as the single-row statement, so batching adds no wait when there
// is no contention; under contention one statement, one commit and one run
// of the queue-count trigger serve many jobs instead of one each.
//
// Per-job answers stay exactly those of the single-row statement: a job the
// batch did not insert (a duplicate ID or idempotency key, the queue bound,
// or a failed batch) is retried alone with it, which gives its own exact
// error (duplicate, queue full, or the driver's).

const (
	// createInflight is how many statements (batches or a lone create)
	// may run at once. One: the next batch builds up its rows while the
	// running one commits. Two were measured worse (submit bench, 16
	// clients: 2 770–2 900 jobs/s against 3 500–3 750 with one), since
	// parallel statements each carry fewer rows, so Postgres and the
	// gateway spend more per job (statement, trigger, commit, round trip:
	// ~580 µs of CPU per job in all against ~450 µs). The price is that a
	// create arriving while a statement runs waits for it to finish.
	createInflight = 1
	// maxCreateBatch bounds the rows of one statement.
	maxCreateBatch = 64
	// createBatchTimeout bounds one batch statement.
	createBatchTimeout = 30 * time.Second
)

// createBatchSQL inserts many jobs of one pool in one autocommit statement:
// $1 pool, $2..$6 and $8 parallel arrays (id, account_id, workflow,
// expires_at, idempotency_key, deployment_id: ” for none), $7 the bound
// (<= 0: none). Like createJobSQL it reads
// the pool's queued count once (q) and admits rows, in array order, while
// count + ordinal stays within the bound. Rows that conflict with an
// existing job (duplicate ID or key, also within the batch) are skipped,
// not errors, so one bad row cannot fail the others. Each inserted row
// comes back with the count read.
const createBatchSQL = `WITH q AS (
		SELECT coalesce(sum(n), 0)::bigint AS queued FROM queue_counts WHERE pool = $1),
	r AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $8::text[])
		WITH ORDINALITY AS r(id, account_id, workflow, expires_at, idempotency_key, deployment_id, ord))
	INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at, idempotency_key, deployment_id)
	SELECT r.id::uuid, r.account_id, $1, 'queued', r.workflow::json, r.expires_at, r.idempotency_key,
		nullif(r.deployment_id, '')
	FROM r, q
	WHERE $7::bigint <= 0 OR q.queued + r.ord <= $7::bigint
	ORDER BY r.ord
	ON CONFLICT DO NOTHING
	RETURNING id::text, created_at, expires_at, greatest((SELECT queued FROM q), 0)`

// createReq is one CreateJob in a batch.
type createReq struct {
	j storage.NewJob
	// Set by the batch: the job when the batch inserted it; inserted false
	// means "retry alone".
	job      storage.Job
	inserted bool
}

// newCreateBatcher returns the combiner of s's CreateJobs.
func newCreateBatcher(s *Store) *combine.Combiner[*createReq] {
	return &combine.Combiner[*createReq]{
		Inflight: createInflight, MaxBatch: maxCreateBatch, Timeout: createBatchTimeout,
		Run: s.writeGroups,
	}
}

// writeGroups writes a batch one pool and bound at a time.
func (s *Store) writeGroups(ctx context.Context, batch []*createReq) {
	for len(batch) > 0 {
		key := batch[0].j
		var group, rest []*createReq
		for _, r := range batch {
			if r.j.Pool == key.Pool && r.j.MaxQueued == key.MaxQueued {
				group = append(group, r)
			} else {
				rest = append(rest, r)
			}
		}
		s.writeBatch(ctx, group)
		batch = rest
	}
}

// writeBatch inserts reqs (one pool, one bound) with createBatchSQL and
// marks those it inserted. A failed statement marks none: each is retried
// alone, which reports its own error.
func (s *Store) writeBatch(ctx context.Context, reqs []*createReq) {
	n := len(reqs)
	ids, accounts, workflows := make([]string, n), make([]string, n), make([]string, n)
	expires, keys, deployments := make([]time.Time, n), make([]*string, n), make([]string, n)
	byID := make(map[string]*createReq, n)
	for i, r := range reqs {
		ids[i], accounts[i], workflows[i], expires[i] = r.j.ID, r.j.AccountID, string(r.j.Workflow), r.j.ExpiresAt
		deployments[i] = r.j.DeploymentID
		if r.j.IdempotencyKey != "" {
			keys[i] = &r.j.IdempotencyKey
		}
		byID[canonicalUUID(r.j.ID)] = r // the form id::text returns
	}
	rows, err := s.pool.Query(ctx, createBatchSQL, reqs[0].j.Pool, ids, accounts, workflows, expires, keys,
		reqs[0].j.MaxQueued, deployments)
	if err != nil {
		return
	}
	type insertedRow struct {
		r       *createReq
		id      string
		created time.Time
		expires time.Time
		queued  int64
	}
	var got []insertedRow
	for rows.Next() {
		var row insertedRow
		if err := rows.Scan(&row.id, &row.created, &row.expires, &row.queued); err != nil {
			rows.Close()
			return
		}
		if row.r = byID[row.id]; row.r != nil {
			got = append(got, row)
		}
	}
	rows.Close()
	if rows.Err() != nil {
		return // the statement failed as a whole (it commits or not as one)
	}
	// All rows share one created_at, so the queue orders them by id: a
	// job's position is the count read plus its rank by id in the batch.
	// (id::text, lower-case hex, sorts as the uuid does.)
	slices.SortFunc(got, func(a, b insertedRow) int { return strings.Compare(a.id, b.id) })
	for i, row := range got {
		j := row.r.j
		row.r.job = storage.Job{
			ID: row.id, AccountID: j.AccountID, Pool: j.Pool, DeploymentID: j.DeploymentID, Status: storage.JobQueued,
			Workflow:  append(json.RawMessage(nil), j.Workflow...),
			CreatedAt: row.created.UTC(), ExpiresAt: row.expires.UTC(),
			Outputs: []storage.Output{}, QueuePosition: int(row.queued) + i + 1,
		}
		row.r.inserted = true
	}
}

// canonicalUUID returns id (which CreateJob checked is a UUID) in the form
// id::text returns: lower case with hyphens. The usual ID, from
// uuid.NewString, is already in that form and is returned as it is: a
// 36-character UUID has its hyphens in place, so only upper-case hex
// digits can set it apart.
func canonicalUUID(id string) string {
	if len(id) == 36 && !strings.ContainsAny(id, "ABCDEF") {
		return id
	}
	u, _ := uuid.Parse(id)
	return u.String()
}
