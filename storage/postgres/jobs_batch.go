package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
)

// Concurrent CreateJobs are written together: while createInflight batch
// statements are running, new creates wait and go out in the next one, as
// one multi-row INSERT (createBatchSQL). A lone create goes out at once as
// the single-row statement, so batching adds no wait when there is no
// contention; under contention one statement, one commit and one run of the
// queue-count trigger serve many jobs instead of one each.
//
// Per-job answers stay exactly those of the single-row statement: a job the
// batch did not insert (a duplicate ID or idempotency key, the queue bound,
// or a failed batch) is retried alone with it, which gives its own exact
// error (duplicate, queue full, or the driver's).

const (
	// createInflight is how many batch statements may run at once. More
	// than one lets a batch build up its rows while another commits.
	createInflight = 2
	// maxCreateBatch bounds the rows of one statement.
	maxCreateBatch = 64
	// createBatchTimeout bounds one batch statement: it serves many
	// requests, so it runs on no single request's context.
	createBatchTimeout = 30 * time.Second
)

// createBatchSQL inserts many jobs of one pool in one autocommit statement:
// $1 pool, $2..$6 parallel arrays (id, account_id, workflow, expires_at,
// idempotency_key), $7 the bound (<= 0: none). Like createJobSQL it reads
// the pool's queued count once (q) and admits rows, in array order, while
// count + ordinal stays within the bound. Rows that conflict with an
// existing job (duplicate ID or key, also within the batch) are skipped,
// not errors, so one bad row cannot fail the others. Each inserted row
// comes back with the count read.
const createBatchSQL = `WITH q AS (
		SELECT coalesce(sum(n), 0)::bigint AS queued FROM queue_counts WHERE pool = $1),
	r AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[])
		WITH ORDINALITY AS r(id, account_id, workflow, expires_at, idempotency_key, ord))
	INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at, idempotency_key)
	SELECT r.id::uuid, r.account_id, $1, 'queued', r.workflow::json, r.expires_at, r.idempotency_key
	FROM r, q
	WHERE $7::bigint <= 0 OR q.queued + r.ord <= $7::bigint
	ORDER BY r.ord
	ON CONFLICT DO NOTHING
	RETURNING id::text, created_at, expires_at, greatest((SELECT queued FROM q), 0)`

// createReq is one CreateJob waiting for a batch.
type createReq struct {
	j    storage.NewJob
	done chan struct{}
	// Set by the batch before done closes: the job when the batch inserted
	// it; inserted false means "retry alone".
	job      storage.Job
	inserted bool
}

// createBatcher gathers concurrent creates into batches.
type createBatcher struct {
	mu       sync.Mutex
	pending  []*createReq
	inflight int
	// write runs one batch (all of one pool and bound) and fills its
	// requests; it must not close their done channels.
	write func(ctx context.Context, reqs []*createReq)
}

// create hands j to a batch and returns the job when the batch inserted
// it. When no batch or lone create is running it returns alone true
// instead: the caller writes j itself at once and must call leave when
// done. Otherwise inserted false means the batch did not insert j (the
// caller retries it alone). err is set only when ctx ended first: j was not
// written if it was still waiting, and may have been if it was not.
func (b *createBatcher) create(ctx context.Context, j storage.NewJob) (job storage.Job, inserted, alone bool, err error) {
	b.mu.Lock()
	if b.inflight == 0 && len(b.pending) == 0 {
		b.inflight++
		b.mu.Unlock()
		return storage.Job{}, false, true, nil
	}
	r := &createReq{j: j, done: make(chan struct{})}
	b.pending = append(b.pending, r)
	if b.inflight < createInflight {
		b.inflight++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.job, r.inserted, false, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.pending, r); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1) // never sent
	}
	b.mu.Unlock()
	return storage.Job{}, false, false, ctx.Err()
}

// leave ends a lone create, handing creates that queued meanwhile to a
// batch.
func (b *createBatcher) leave() {
	b.mu.Lock()
	b.inflight--
	start := len(b.pending) > 0 && b.inflight < createInflight
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go b.flush()
	}
}

// flush writes pending batches until none is left, then gives up its slot.
func (b *createBatcher) flush() {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		n := min(len(b.pending), maxCreateBatch)
		batch := slices.Clone(b.pending[:n])
		b.pending = slices.Delete(b.pending, 0, n)
		b.mu.Unlock()
		b.writeGroups(batch)
	}
}

// writeGroups writes batch one pool and bound at a time and releases every
// request.
func (b *createBatcher) writeGroups(batch []*createReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), createBatchTimeout)
	defer cancel()
	for left := batch; len(left) > 0; {
		key := left[0].j
		var group, rest []*createReq
		for _, r := range left {
			if r.j.Pool == key.Pool && r.j.MaxQueued == key.MaxQueued {
				group = append(group, r)
			} else {
				rest = append(rest, r)
			}
		}
		b.write(ctx, group)
		left = rest
	}
}

// writeBatch inserts reqs (one pool, one bound) with createBatchSQL and
// marks those it inserted. A failed statement marks none: each is retried
// alone, which reports its own error.
func (s *Store) writeBatch(ctx context.Context, reqs []*createReq) {
	n := len(reqs)
	ids, accounts, workflows := make([]string, n), make([]string, n), make([]string, n)
	expires, keys := make([]time.Time, n), make([]*string, n)
	byID := make(map[string]*createReq, n)
	for i, r := range reqs {
		id, err := uuid.Parse(r.j.ID)
		if err != nil {
			continue // CreateJob checked it; left for the lone retry to refuse
		}
		ids[i], accounts[i], workflows[i], expires[i] = r.j.ID, r.j.AccountID, string(r.j.Workflow), r.j.ExpiresAt
		if r.j.IdempotencyKey != "" {
			k := r.j.IdempotencyKey
			keys[i] = &k
		}
		byID[id.String()] = r // the form id::text returns
	}
	rows, err := s.pool.Query(ctx, createBatchSQL, reqs[0].j.Pool, ids, accounts, workflows, expires, keys,
		reqs[0].j.MaxQueued)
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
			ID: row.id, AccountID: j.AccountID, Pool: j.Pool, Status: storage.JobQueued,
			Workflow:  append(json.RawMessage(nil), j.Workflow...),
			CreatedAt: row.created.UTC(), ExpiresAt: row.expires.UTC(),
			Outputs: []storage.Output{}, QueuePosition: int(row.queued) + i + 1,
		}
		row.r.inserted = true
	}
}
