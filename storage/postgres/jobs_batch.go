package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
// batch did not insert (a duplicate ID or idempotency key, a queue bound,
// a short balance, or a failed batch) is retried alone with it, which gives
// its own exact error (duplicate, queue full, account queue full,
// insufficient credits, or the driver's).

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

// batchSQL is the statement that inserts many jobs of one pool at once,
// in one autocommit statement; createBatchSQL[priced] is built from it for
// batches of free and of priced jobs (a pool's jobs are all one or the
// other), so a free batch carries none of the ledger's work. Parameters:
// $1 pool, $2..$6 parallel arrays (id, account_id, workflow, expires_at,
// idempotency_key), $7 the pool's bound and $8 the account's bound (<= 0:
// none), $9 an array of deployment ids (” for none), $10 an array of
// traceparents (” for none), and for priced batches $11..$13 arrays
// (reserve, per job, per second).
//
// Like createJobSQL it reads the pool's queued count once (q), under the
// pool's admission lock (lockAdmission), and admits rows, in array order,
// while count + ordinal stays within the pool's bound (the first tier of
// the fair-admission rule: past it, rows are retried alone, where
// createJobSQL applies the whole rule)
// and each account's queued count + its rank in the batch within the
// account's bound; it gives each account's rows consecutive turns from the
// account's next turn (accts). A priced row is admitted while the account's
// balance, read with its row locked (funds, in account order), covers the
// reserves of the account's rows up to it, and only inserted rows are paid
// for (entries, paid). Rows that conflict with an existing job (duplicate
// ID or key, also within the batch) are skipped, not errors, so one bad row
// cannot fail the others. Each inserted row comes back with its turn and
// the count of queued jobs ahead of it as read.
func batchSQL(priced bool) string {
	arrays, columns, cum, funds, fundsJoin, covered := "", "", "", "", "", ""
	priceCols, priceVals, returning, ledger := "", "", "", ""
	if priced {
		arrays = `, $11::bigint[], $12::bigint[], $13::bigint[]`
		columns = `, reserve, per_job, per_second`
		cum = `, sum(u.reserve) OVER w AS cum`
		funds = `
	funds AS MATERIALIZED (SELECT account_id, balance FROM credit_accounts
		WHERE account_id IN (SELECT account_id FROM r) ORDER BY account_id FOR NO KEY UPDATE),`
		fundsJoin = ` LEFT JOIN funds USING (account_id)`
		covered = ` AND r.cum <= coalesce(funds.balance, 0)`
		priceCols = `, price_per_job, price_per_second, reserved_credits`
		priceVals = `, ok.per_job, ok.per_second, ok.reserve`
		returning = `, reserved_credits`
		ledger = `,
	entries AS (INSERT INTO credit_entries (account_id, kind, amount, job_id)
		SELECT account_id, 'reservation', -reserved_credits, id FROM ins),
	paid AS (UPDATE credit_accounts c SET balance = c.balance - d.total, updated_at = now()
		FROM (SELECT account_id, sum(reserved_credits) AS total FROM ins GROUP BY account_id) d
		WHERE c.account_id = d.account_id)`
	}
	return `WITH q AS (
		SELECT coalesce(sum(n), 0)::bigint AS queued FROM queue_counts WHERE pool = $1),
	` + queueEnds("$1") + `,
	r AS (SELECT u.*, row_number() OVER w AS arank` + cum + `
		FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $9::text[], $10::text[]` + arrays + `)
			WITH ORDINALITY AS u(id, account_id, workflow, expires_at, idempotency_key, deployment_id, trace_parent` + columns + `, ord)
		WINDOW w AS (PARTITION BY u.account_id ORDER BY u.ord)),
	accts AS (SELECT a.account_id,
			coalesce(` + lastTurn("$1", "a.account_id") + ` + 1, (SELECT front FROM ends), 0) AS base,
			CASE WHEN $8::bigint > 0 THEN (SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE j.pool = $1
				AND j.account_id = a.account_id AND j.status = 'queued' LIMIT $8::bigint) x) ELSE 0 END AS queued
		FROM (SELECT DISTINCT account_id FROM r) a),` + funds + `
	ok AS (SELECT r.*, accts.base + r.arank - 1 AS turn
		FROM r JOIN accts USING (account_id)` + fundsJoin + ` CROSS JOIN q
		WHERE ($7::bigint <= 0 OR q.queued + r.ord <= $7::bigint)
			AND ($8::bigint <= 0 OR accts.queued + r.arank <= $8::bigint)` + covered + `),
	ins AS (INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at, idempotency_key, deployment_id,
			trace_parent, turn` + priceCols + `)
		SELECT ok.id::uuid, ok.account_id, $1, 'queued', ok.workflow::json, ok.expires_at, ok.idempotency_key,
			nullif(ok.deployment_id, ''), nullif(ok.trace_parent, ''), ok.turn` + priceVals + `
		FROM ok ORDER BY ok.ord
		ON CONFLICT DO NOTHING
		RETURNING id, account_id, created_at, expires_at, turn` + returning + `)` + ledger + `
	SELECT ins.id::text, ins.created_at, ins.expires_at, ins.turn, ` + positionOf("ins.turn", "$1") + `
	FROM ins, q, ends`
}

// createBatchSQL holds batchSQL for free (false) and priced (true) batches.
var createBatchSQL = map[bool]string{false: batchSQL(false), true: batchSQL(true)}

// createReq is one CreateJob in a batch.
type createReq struct {
	j storage.NewJob
	// Set by the batch: the job when the batch inserted it; inserted false
	// means "retry alone".
	job      storage.Job
	inserted bool
	// unknown is set when the batch's outcome could not be learned
	// (resolveBatch): the create fails with it, keeping its key.
	unknown error
}

// newCreateBatcher returns the combiner of s's CreateJobs.
func newCreateBatcher(s *Store) *combine.Combiner[*createReq] {
	return &combine.Combiner[*createReq]{
		Inflight: createInflight, MaxBatch: maxCreateBatch, Timeout: createBatchTimeout,
		Run: s.writeGroups,
	}
}

// writeGroups writes a batch one pool, pair of bounds and pricing at a time.
func (s *Store) writeGroups(ctx context.Context, batch []*createReq) {
	for len(batch) > 0 {
		key := batch[0].j
		var group, rest []*createReq
		for _, r := range batch {
			if r.j.Pool == key.Pool && r.j.MaxQueued == key.MaxQueued && r.j.AccountMaxQueued == key.AccountMaxQueued &&
				(r.j.Price == nil) == (key.Price == nil) {
				group = append(group, r)
			} else {
				rest = append(rest, r)
			}
		}
		s.writeBatch(ctx, group)
		batch = rest
	}
}

// writeBatch inserts reqs (one pool, one pair of bounds, all free or all
// priced) with
// createBatchSQL and marks those it inserted. A failed statement marks
// none: each is retried alone, which reports its own error.
func (s *Store) writeBatch(ctx context.Context, reqs []*createReq) {
	n := len(reqs)
	ids, accounts, workflows := make([]string, n), make([]string, n), make([]string, n)
	expires, keys, deployments := make([]time.Time, n), make([]*string, n), make([]string, n)
	traces := make([]string, n)
	reserves, perJob, perSecond := make([]int64, n), make([]int64, n), make([]int64, n)
	byID := make(map[string]*createReq, n)
	for i, r := range reqs {
		ids[i], accounts[i], workflows[i], expires[i] = r.j.ID, r.j.AccountID, string(r.j.Workflow), r.j.ExpiresAt
		deployments[i], traces[i] = r.j.DeploymentID, r.j.TraceParent
		if r.j.IdempotencyKey != "" {
			keys[i] = &r.j.IdempotencyKey
		}
		reserves[i], perJob[i], perSecond[i] = priceArgs(r.j)
		byID[canonicalUUID(r.j.ID)] = r // the form id::text returns
	}
	first := reqs[0].j
	args := []any{first.Pool, ids, accounts, workflows, expires, keys, first.MaxQueued, first.AccountMaxQueued, deployments, traces}
	priced := first.Price != nil
	if priced {
		args = append(args, reserves, perJob, perSecond)
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer c.Release()
	sess := sessionOf(c.Conn())
	b := &pgx.Batch{}
	locked := lockAdmission(b, first)
	b.Queue(createBatchSQL[priced], args...)
	br := c.SendBatch(ctx, b)
	defer br.Close()
	if locked {
		_, err = br.Exec()
	}
	var rows pgx.Rows
	if err == nil {
		rows, err = br.Query()
	}
	if inDoubt(err) {
		s.resolveBatch(ctx, reqs, sess, err)
		return
	}
	if err != nil {
		return
	}
	type insertedRow struct {
		r       *createReq
		id      string
		created time.Time
		expires time.Time
		turn    int64
		ahead   int64
	}
	var got []insertedRow
	for rows.Next() {
		var row insertedRow
		if err := rows.Scan(&row.id, &row.created, &row.expires, &row.turn, &row.ahead); err != nil {
			rows.Close()
			return
		}
		if row.r = byID[row.id]; row.r != nil {
			got = append(got, row)
		}
	}
	rows.Close()
	err = rows.Err()
	if err == nil {
		err = br.Close() // the commit
	}
	if inDoubt(err) {
		s.resolveBatch(ctx, reqs, sess, err)
		return
	} else if err != nil {
		return // the statement failed as a whole (it commits or not as one)
	}
	// All rows share one created_at, so the queue orders them by turn, then
	// id: a job's position is what was ahead of it as read plus its rank in
	// the batch. (id::text, lower-case hex, sorts as the uuid does.)
	slices.SortFunc(got, func(a, b insertedRow) int {
		if c := cmp.Compare(a.turn, b.turn); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	for i, row := range got {
		j := row.r.j
		row.r.job = storage.Job{
			ID: row.id, AccountID: j.AccountID, Pool: j.Pool, DeploymentID: j.DeploymentID, Status: storage.JobQueued,
			Workflow:  append(json.RawMessage(nil), j.Workflow...),
			CreatedAt: row.created.UTC(), ExpiresAt: row.expires.UTC(),
			Outputs: []storage.Output{}, QueuePosition: int(row.ahead) + i + 1, Credits: newJobCredits(j),
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
