package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.JobStore = (*Store)(nil)

// jobColumns is the select list scanJob reads, in order. The json columns
// are read as text so the submitted bytes come back unchanged.
const jobColumns = `id::text, account_id, pool, status, workflow::text, created_at, started_at,
	completed_at, expires_at, progress::text, error::text, attempt, coalesce(deployment_id, '') AS deployment_id,
	price_per_job, price_per_second, reserved_credits, charged_credits`

// jobColumnNames names jobColumns' outputs, for a query that selects them
// from a CTE that returned jobColumns.
const jobColumnNames = `id, account_id, pool, status, workflow, created_at, started_at,
	completed_at, expires_at, progress, error, attempt, deployment_id,
	price_per_job, price_per_second, reserved_credits, charged_credits`

// assetColumnsA is assetColumns qualified for joins with job_outputs.
const assetColumnsA = `a.id::text, a.account_id, a.hash, a.size_bytes, a.content_type, a.file_path,
	a.tags, coalesce(a.job_id::text, ''), a.created_at, a.expires_at, coalesce(a.deployment_id, ''),
	coalesce((SELECT b.object_key FROM blobs b WHERE b.hash = a.hash), '')`

// ownsLease is the condition every attempt write carries: the attempt still
// holds the job. It is how a reclaimed attempt's late writes are refused.
const ownsLease = `id = $1 AND attempt = $2 AND status IN ('running', 'canceling')`

// assetHeldByJob is true for an asset (the outer row, named assets) that is
// an output of a job that is not expired and whose retention deadline is
// after clock (an SQL expression). Such an asset cannot be deleted: a job
// keeps its outputs until it expires or its retention passes, whatever its
// status.
func assetHeldByJob(clock string) string {
	return `EXISTS (SELECT 1 FROM job_outputs o JOIN jobs j ON j.id = o.job_id
	WHERE o.asset_id = assets.id AND j.status <> 'expired' AND j.expires_at > ` + clock + `)`
}

// createJobSQL inserts a queued job when the pool and the account have
// room and, for a priced job, the account's balance covers its reserve, in
// one autocommit statement, and returns the job with its queue position.
// Parameters: $1 id, $2 account, $3 pool, $4 workflow, $5 expires_at, $6
// idempotency key, $7 the pool's bound, $8 the account's bound (<= 0:
// none), $9 the reserve (<= 0: unpriced), $10 per job, $11 per second,
// $12 the deployment (” for none), $13 the traceparent (” for none).
//
// q sums the pool's shard rows in queue_counts (migration 0004), which
// triggers on jobs keep equal to its queued jobs: at most 64 rows whatever
// the queue's length, read in the statement's snapshot (committed jobs
// only). ends and mine are index probes (jobs_turns, jobs_account_turns):
// the pool's front and back turns and the account's last turn; the job's
// turn follows the storage package's fair-share rule. The account's queued
// count is read only under a bound (lim: its own, or the pool's once the
// pool holds $7), and counts no further than it; accts, the pool's
// accounts with queued jobs (a scan of its queue, at most 2 × $7), only
// when storage.Admission.NeedsAccounts; v applies the fair-admission rule
// (admittedSQL). paid takes the reserve from the balance (its row lock orders concurrent
// reservations of one account; balance >= $9 is checked on the row as
// locked, so they can never overdraw), and the job is inserted only if
// every check passed, with its reservation entry. The one row returned
// says why nothing was inserted (ins is then NULL): not admitted, with
// the counts storage.Admit names the bound from, or else the balance was
// short.
var createJobSQL = `WITH q AS (
		SELECT coalesce(sum(n), 0)::bigint AS queued FROM queue_counts WHERE pool = $3),
	` + queueEnds("$3") + `,
	lim AS (SELECT CASE WHEN $7::bigint > 0 AND q.queued >= $7::bigint THEN greatest($8::bigint, $7::bigint)
			ELSE greatest($8::bigint, 0) END AS n FROM q),
	mine AS (SELECT ` + lastTurn("$3", "$2") + ` AS last,
		CASE WHEN lim.n > 0 THEN (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE pool = $3
			AND account_id = $2 AND status = 'queued' LIMIT lim.n) x) ELSE 0 END AS queued FROM lim),
	accts AS (SELECT CASE WHEN $7::bigint > 0 AND q.queued >= $7::bigint AND q.queued < 2 * $7::bigint AND mine.queued > 0
			THEN (SELECT count(DISTINCT account_id) FROM jobs WHERE pool = $3 AND status = 'queued') ELSE 0 END AS n
		FROM q, mine),
	v AS (SELECT ` + admittedSQL("$7::bigint", "$8::bigint", "q.queued", "mine.queued", "accts.n") + ` AS admitted,
			coalesce(mine.last + 1, ends.front, 0) AS turn
		FROM q, ends, mine, accts),
	paid AS (UPDATE credit_accounts SET balance = balance - $9::bigint, updated_at = now()
		WHERE $9::bigint > 0 AND account_id = $2 AND balance >= $9::bigint
			AND (SELECT admitted FROM v)
		RETURNING account_id),
	ins AS (INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at, idempotency_key, turn,
			price_per_job, price_per_second, reserved_credits, deployment_id, trace_parent)
		SELECT $1, $2, $3, 'queued', $4::text::json, $5, $6, v.turn, ` + priceValues("$9::bigint", "$10::bigint", "$11::bigint") + `,
			nullif($12, ''), nullif($13, '')
		FROM v WHERE v.admitted AND ($9::bigint <= 0 OR EXISTS (SELECT 1 FROM paid))
		RETURNING id, account_id, created_at, expires_at),
	entry AS (INSERT INTO credit_entries (account_id, kind, amount, job_id)
		SELECT account_id, 'reservation', -$9::bigint, id FROM ins WHERE $9::bigint > 0)
	SELECT v.admitted, q.queued, mine.queued, accts.n, ins.id::text, ins.created_at, ins.expires_at,
		CASE WHEN ins.id IS NULL THEN 0 ELSE ` + positionOf("v.turn", "$3") + ` END
	FROM v CROSS JOIN q CROSS JOIN ends CROSS JOIN mine CROSS JOIN accts LEFT JOIN ins ON true`

// admittedSQL is storage.Admit in SQL: whether a job is admitted with the
// pool's bound m and the account's am (<= 0: none), the pool's queued
// jobs pq, the account's aq (counted as storage.Admission says) and the
// pool's accounts n (counted when Admission.NeedsAccounts).
func admittedSQL(m, am, pq, aq, n string) string {
	return `(NOT (` + am + ` > 0 AND ` + aq + ` >= ` + am + `)
		AND (` + m + ` <= 0 OR ` + pq + ` < ` + m + ` OR (` + pq + ` < 2 * ` + m + ` AND (` + aq + ` = 0
			OR (` + aq + ` < greatest(1, ` + m + ` / greatest(` + n + `, 1)) AND ` + pq + ` < ` + m + ` + ` + m + ` / 2)))))`
}

// admitLockClass is the first half of the advisory lock key that bounded
// creates of one pool take ("admt"), so that each reads the queue as the
// one before it committed it.
const admitLockClass int32 = 0x61646d74

// lockAdmission queues, in b, the lock bounded creates of j's pool take
// (none for an unbounded j) and reports whether it did. Sent in one batch
// with the create (one implicit transaction, one round trip), it is held
// until the create commits, and the create's statement, which starts
// after it, reads the queue as every earlier bounded create of the pool
// left it: concurrent creates (of this process or another) cannot pass a
// bound. TestFairAdmissionAcrossStores fails without it.
func lockAdmission(b *pgx.Batch, j storage.NewJob) bool {
	if j.MaxQueued <= 0 && j.AccountMaxQueued <= 0 {
		return false
	}
	b.Queue(`SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`, admitLockClass, j.Pool)
	return true
}

// queueEnds is the CTE ends: pool's front and back turns, one probe each
// of jobs_turns. The ORDER BY … LIMIT 1 form names that index's order:
// with min()/max() the planner, on stale statistics, was seen aggregating
// over every queued job on jobs_account_turns instead (O(queue)).
func queueEnds(pool string) string {
	return `ends AS (SELECT
		(SELECT turn FROM jobs WHERE pool = ` + pool + ` AND status = 'queued'
			ORDER BY turn, created_at, id LIMIT 1) AS front,
		(SELECT turn FROM jobs WHERE pool = ` + pool + ` AND status = 'queued'
			ORDER BY turn DESC, created_at DESC, id DESC LIMIT 1) AS back)`
}

// lastTurn is the account's last queued turn in pool (NULL when it has
// none), one probe of jobs_account_turns.
func lastTurn(pool, account string) string {
	return `(SELECT turn FROM jobs WHERE pool = ` + pool + ` AND account_id = ` + account + ` AND status = 'queued'
		ORDER BY turn DESC LIMIT 1)`
}

// priceValues is the price_per_job, price_per_second and reserved_credits
// values of an insert: NULL for an unpriced job (reserve <= 0).
func priceValues(reserve, perJob, perSecond string) string {
	return `CASE WHEN ` + reserve + ` > 0 THEN ` + perJob + ` END, CASE WHEN ` + reserve + ` > 0 THEN ` + perSecond +
		` END, CASE WHEN ` + reserve + ` > 0 THEN ` + reserve + ` END`
}

// positionOf is, for a job inserted at turn into pool (in a statement with
// q and ends as in createJobSQL), the number of queued jobs ahead of it as
// the statement read the queue: the whole queue (q, O(1)) when it joins at
// the back, which is every job of a lone account; else the queued jobs at
// its turn or before, counted up to storage.ExactQueuePositions and
// estimated beyond (see storage.EstimateQueuePosition; the job joins
// behind every job at its turn, hence turn + 1). The range from the front
// makes the planner read the count on jobs_turns.
func positionOf(turn, pool string) string {
	return `CASE WHEN ` + turn + ` >= coalesce(ends.back, ` + turn + `) THEN q.queued
		ELSE (SELECT CASE WHEN c.n < ` + exactPositions + ` THEN c.n
			ELSE ` + estimatePosition(turn+" + 1", "ends.front", "ends.back", "q.queued") + ` - 1 END
		FROM (SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE pool = ` + pool + ` AND status = 'queued'
			AND turn BETWEEN ends.front AND ` + turn + ` LIMIT ` + exactPositions + `) x) c) END`
}

// exactPositions is storage.ExactQueuePositions as an SQL literal.
var exactPositions = strconv.Itoa(storage.ExactQueuePositions)

// estimatePosition is storage.EstimateQueuePosition in SQL.
func estimatePosition(turn, front, back, queued string) string {
	return `greatest(` + exactPositions + ` + 1, least(` + queued + `, CASE WHEN ` + turn + ` > ` + front +
		` THEN (` + turn + ` - ` + front + `) * ` + queued + ` / greatest(1, ` + back + ` - ` + front + ` + 1) ELSE 0 END + 1))`
}

// CreateJob records a queued job in one autocommit statement: createJobSQL
// when it is alone, or one createBatchSQL for many concurrent creates (see
// jobs_batch.go); either way one round trip. Submissions are
// not serialized: the insert's trigger holds one of the pool's 64 count
// shards until commit, so only those that pick the same shard wait for
// each other (and priced ones of one account on its balance row). A
// bounded create (MaxQueued or AccountMaxQueued set) first takes its
// pool's admission lock (lockAdmission), in the same round trip, so each
// reads the queue as the one before it committed it: the bounds are exact
// under concurrency, across processes too. A duplicate ID or idempotency key wins over a full queue or a
// short balance: when the job can be inserted the insert's unique
// violation reports it, and any refusal is checked for one before it is
// returned.
func (s *Store) CreateJob(ctx context.Context, j storage.NewJob) (storage.Job, error) {
	if !isUUID(j.ID) || j.AccountID == "" || j.Pool == "" {
		return storage.Job{}, errors.New("postgres: create job: needs a UUID ID, AccountID and Pool")
	}
	if !storage.ValidJSON(j.Workflow) {
		return storage.Job{}, errors.New("postgres: create job: workflow is not valid JSON")
	}
	if j.Price != nil && !j.Price.Valid() {
		return storage.Job{}, errors.New("postgres: create job: invalid price")
	}
	r := &createReq{j: j}
	alone, err := s.creates.Do(ctx, r)
	switch {
	case err != nil:
		return storage.Job{}, mapErr("create job", err)
	case r.inserted:
		return r.job, nil
	case r.unknown != nil: // only batched requests (never alone) get it
		return storage.Job{}, r.unknown
	case alone:
		defer s.creates.Leave()
	}
	// Alone, or a job the batch did not insert.
	return s.createOne(ctx, j)
}

// priceArgs are a NewJob's reserve, per-job and per-second figures (all 0
// for an unpriced job).
func priceArgs(j storage.NewJob) (reserve, perJob, perSecond int64) {
	if j.Price == nil {
		return 0, 0, 0
	}
	return j.Price.Reserve, j.Price.PerJob, j.Price.PerSecond
}

// newJobCredits is the Credits of a job just created from j.
func newJobCredits(j storage.NewJob) *storage.JobCredits {
	if j.Price == nil {
		return nil
	}
	return &storage.JobCredits{PerJob: j.Price.PerJob, PerSecond: j.Price.PerSecond, Reserved: j.Price.Reserve}
}

// createOne writes j alone with createJobSQL.
func (s *Store) createOne(ctx context.Context, j storage.NewJob) (storage.Job, error) {
	var idemKey *string
	if j.IdempotencyKey != "" {
		idemKey = &j.IdempotencyKey
	}
	reserve, perJob, perSecond := priceArgs(j)
	var (
		admitted                   bool
		poolQueued, mine, accounts int64
		id                         *string
		created, expires           *time.Time
		ahead                      int64
	)
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return storage.Job{}, mapErr("create job", err)
	}
	sess := sessionOf(c.Conn())
	b := &pgx.Batch{}
	locked := lockAdmission(b, j)
	b.Queue(createJobSQL, j.ID, j.AccountID, j.Pool, string(j.Workflow), j.ExpiresAt, idemKey,
		j.MaxQueued, j.AccountMaxQueued, reserve, perJob, perSecond, j.DeploymentID, j.TraceParent)
	br := c.SendBatch(ctx, b)
	if locked {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&admitted, &poolQueued, &mine, &accounts, &id, &created, &expires, &ahead)
	}
	if cerr := br.Close(); err == nil {
		err = cerr // the commit
	}
	c.Release()
	if inDoubt(err) {
		// The autocommit statement was sent and no answer came back: learn
		// whether it committed (indoubt.go).
		return s.resolveJob(ctx, j, sess, err)
	}
	if err != nil {
		return storage.Job{}, mapErr("create job", err)
	}
	if id == nil {
		refusal := storage.ErrInsufficientCredits
		if !admitted {
			refusal = storage.Admit(storage.Admission{MaxQueued: j.MaxQueued, AccountMaxQueued: j.AccountMaxQueued,
				PoolQueued: int(poolQueued), AccountQueued: int(mine), Accounts: int(accounts)})
			if refusal == nil { // the SQL and storage.Admit disagree: still a refusal
				refusal = storage.ErrQueueFull
			}
		}
		return storage.Job{}, s.refuse(ctx, j, idemKey, refusal)
	}
	return storage.Job{
		ID: *id, AccountID: j.AccountID, Pool: j.Pool, DeploymentID: j.DeploymentID, Status: storage.JobQueued,
		Workflow:  append(json.RawMessage(nil), j.Workflow...),
		CreatedAt: created.UTC(), ExpiresAt: expires.UTC(), Outputs: []storage.Output{},
		QueuePosition: int(ahead) + 1, Credits: newJobCredits(j),
	}, nil
}

// refuse is the error for a create that was refused (queue full, account
// queue full or insufficient credits): ErrDuplicate when the job's ID or
// idempotency key is already taken (that answer wins), else refusal.
func (s *Store) refuse(ctx context.Context, j storage.NewJob, idemKey *string, refusal error) error {
	var dup bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)
		OR EXISTS (SELECT 1 FROM jobs WHERE account_id = $2 AND idempotency_key = $3)`,
		j.ID, j.AccountID, idemKey).Scan(&dup); err != nil {
		return mapErr("create job: check duplicate", err)
	}
	if dup {
		return fmt.Errorf("postgres: create job: %w", storage.ErrDuplicate)
	}
	return refusal
}

// GetJob returns the account's job with its outputs and, when it is
// queued, its QueuePosition.
func (s *Store) GetJob(ctx context.Context, accountID, id string) (storage.Job, error) {
	if !isUUID(id) {
		return storage.Job{}, fmt.Errorf("postgres: get job: %w", storage.ErrNotFound)
	}
	// One round trip for the job and its outputs: the hottest read of the
	// API. Outputs only ever grow, so reading them a statement after the
	// job can at most show one that landed in between.
	batch := &pgx.Batch{}
	batch.Queue(`SELECT `+jobColumns+`, `+queuePositionOfJ+` FROM jobs j WHERE id = $1 AND account_id = $2`,
		id, accountID)
	batch.Queue(outputsQuery, id)
	br := s.pool.SendBatch(ctx, batch)
	defer br.Close()
	var pos int64
	job, err := scanJob(br.QueryRow(), &pos)
	if err != nil {
		return storage.Job{}, mapErr("read job", err)
	}
	job.QueuePosition = int(pos)
	rows, err := br.Query()
	if err != nil {
		return storage.Job{}, mapErr("read job outputs", err)
	}
	if job.Outputs, err = scanOutputs(rows); err != nil {
		return storage.Job{}, err
	}
	return job, nil
}

// ListJobs returns the account's jobs newest first (created_at, then id,
// descending), with their outputs. A Limit outside 1..101 means 100
// (storage.JobQueryLimit).
func (s *Store) ListJobs(ctx context.Context, accountID string, q storage.JobQuery) ([]storage.Job, error) {
	var where []string
	var args []any
	if accountID != "" {
		args = append(args, accountID)
		where = append(where, `account_id = $1`)
	}
	if len(q.Statuses) > 0 {
		args = append(args, q.Statuses)
		where = append(where, fmt.Sprintf(`status = ANY($%d::text[])`, len(args)))
	}
	if q.DeploymentID != "" {
		args = append(args, q.DeploymentID)
		where = append(where, fmt.Sprintf(`deployment_id = $%d`, len(args)))
	}
	if q.Before != nil {
		// id::text orders like the uuid for the lower-case form Postgres
		// returns, and accepts a cursor id that is not a UUID. The index
		// cannot take a row comparison with id::text, so created_at <= the
		// cursor's is stated apart: it starts the index scan at the cursor
		// (without it a deep page read and dropped every newer job first).
		args = append(args, q.Before.CreatedAt, q.Before.ID)
		where = append(where, fmt.Sprintf(`created_at <= $%d AND (created_at, id::text) < ($%d, $%d)`,
			len(args)-1, len(args)-1, len(args)))
	}
	args = append(args, storage.JobQueryLimit(q.Limit))
	filter := ``
	if len(where) > 0 {
		filter = ` WHERE ` + strings.Join(where, ` AND `)
	}
	jobs, err := queryJobs(ctx, s.pool, fmt.Sprintf(`SELECT `+jobColumns+` FROM jobs`+filter+
		` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, err
	}
	return jobs, attachOutputs(ctx, s.pool, jobs)
}

// attachOutputs reads the outputs of every job in jobs with one query (on
// job_outputs' primary key) and sets each job's Outputs, in commit order.
func attachOutputs(ctx context.Context, q querier, jobs []storage.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	byID := make(map[string]*storage.Job, len(jobs))
	ids := make([]string, len(jobs))
	for i := range jobs {
		jobs[i].Outputs = []storage.Output{}
		byID[jobs[i].ID] = &jobs[i]
		ids[i] = jobs[i].ID
	}
	rows, err := q.Query(ctx, `SELECT o.job_id::text, o.node_id, o.name, o.type, coalesce(o.folder_type, ''), `+assetColumnsA+`
		FROM job_outputs o JOIN assets a ON a.id = o.asset_id
		WHERE o.job_id = ANY($1::uuid[]) ORDER BY o.job_id, o.seq`, ids)
	if err != nil {
		return mapErr("list job outputs", err)
	}
	defer rows.Close()
	for rows.Next() {
		var jobID string
		var o storage.Output
		if o.Asset, err = scanAsset(rows, &jobID, &o.NodeID, &o.Name, &o.Type, &o.Folder); err != nil {
			return mapErr("list job outputs", err)
		}
		j := byID[jobID]
		j.Outputs = append(j.Outputs, o)
	}
	if err := rows.Err(); err != nil {
		return mapErr("list job outputs", err)
	}
	return nil
}

// CountJobs reads each pool's queued jobs from queue_counts (O(pools), not
// O(queue)) and its running ones on the partial index of leased jobs.
func (s *Store) CountJobs(ctx context.Context) (map[string]storage.PoolCounts, error) {
	rows, err := s.pool.Query(ctx, `SELECT pool, sum(queued)::bigint, sum(running)::bigint FROM (
			SELECT pool, n AS queued, 0 AS running FROM queue_counts
			UNION ALL
			SELECT pool, 0, count(*) FROM jobs WHERE status IN ('running', 'canceling') GROUP BY pool) AS c
		GROUP BY pool`)
	if err != nil {
		return nil, mapErr("count jobs", err)
	}
	defer rows.Close()
	counts := map[string]storage.PoolCounts{}
	for rows.Next() {
		var pool string
		var c storage.PoolCounts
		if err := rows.Scan(&pool, &c.Queued, &c.Running); err != nil {
			return nil, mapErr("count jobs", err)
		}
		counts[pool] = c
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("count jobs", err)
	}
	return counts, nil
}

// queuePositionOfJ is the 1-based place of the job row j among its pool's
// queued jobs in claim order, or 0 when j is not queued: the jobs ahead of
// j counted on jobs_turns up to storage.ExactQueuePositions, and beyond it
// storage.EstimateQueuePosition from the pool's queue_counts and its front
// and back turns (evaluated only then). O(1) in the queue's length.
var queuePositionOfJ = `CASE WHEN j.status = 'queued' THEN (SELECT CASE WHEN c.n < ` + exactPositions + ` THEN c.n + 1
		ELSE (SELECT ` + estimatePosition("j.turn", "e.front", "e.back", "e.queued") + ` FROM (SELECT
			(SELECT coalesce(sum(n), 0)::bigint FROM queue_counts WHERE pool = j.pool) AS queued,
			(SELECT turn FROM jobs WHERE pool = j.pool AND status = 'queued'
				ORDER BY turn, created_at, id LIMIT 1) AS front,
			(SELECT turn FROM jobs WHERE pool = j.pool AND status = 'queued'
				ORDER BY turn DESC, created_at DESC, id DESC LIMIT 1) AS back) e) END
	FROM (SELECT count(*) AS n FROM (SELECT 1 FROM jobs q WHERE q.pool = j.pool AND q.status = 'queued'
		AND (q.turn, q.created_at, q.id) < (j.turn, j.created_at, j.id) LIMIT ` + exactPositions + `) x) c)
	ELSE 0 END`

// QueuePosition is the job's 1-based place among its pool's queued jobs in
// claim order; 0 when the job is not queued or does not exist.
func (s *Store) QueuePosition(ctx context.Context, id string) (int, error) {
	if !isUUID(id) {
		return 0, nil
	}
	var pos int
	err := s.pool.QueryRow(ctx, `SELECT `+queuePositionOfJ+` FROM jobs j WHERE j.id = $1 AND j.status = 'queued'`,
		id).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, mapErr("queue position", err)
	}
	return pos, nil
}

// CancelJob moves a queued job to canceled (settling a priced one: a
// refund) and a running one to canceling; any other job is returned
// unchanged. A claim racing the cancel is waited
// for, and the cancel then applies to the running job.
func (s *Store) CancelJob(ctx context.Context, accountID, id string) (storage.Job, error) {
	if !isUUID(id) {
		return storage.Job{}, fmt.Errorf("postgres: cancel job: %w", storage.ErrNotFound)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.Job{}, mapErr("cancel job: begin", err)
	}
	defer rollback(ctx, tx)
	// A queued job ends here and is refunded in the same statement.
	const canceled = `CASE status WHEN 'queued' THEN 'canceled' ELSE 'canceling' END`
	if _, err := tx.Exec(ctx, settling(`UPDATE jobs SET status = `+canceled+`,
			completed_at = CASE status WHEN 'queued' THEN now() ELSE completed_at END,
			`+chargeSet(canceled, `now()`, `false`)+`
		WHERE id = $1 AND account_id = $2 AND status IN ('queued', 'running')`), id, accountID); err != nil {
		return storage.Job{}, mapErr("cancel job", err)
	}
	job, err := loadJob(ctx, tx, `id = $1 AND account_id = $2`, id, accountID)
	if err != nil {
		return storage.Job{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return storage.Job{}, commitErr("cancel job: commit", err)
	}
	return job, nil
}

// loadJob reads the one job matching where, with its outputs in seq order.
func loadJob(ctx context.Context, q querier, where string, args ...any) (storage.Job, error) {
	job, err := scanJob(q.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE `+where, args...))
	if err != nil {
		return storage.Job{}, mapErr("read job", err)
	}
	rows, err := q.Query(ctx, outputsQuery, job.ID)
	if err != nil {
		return storage.Job{}, mapErr("read job outputs", err)
	}
	if job.Outputs, err = scanOutputs(rows); err != nil {
		return storage.Job{}, err
	}
	return job, nil
}

// outputsQuery reads a job's outputs with their assets, in commit order.
var outputsQuery = `SELECT o.node_id, o.name, o.type, coalesce(o.folder_type, ''), ` + assetColumnsA + `
	FROM job_outputs o JOIN assets a ON a.id = o.asset_id
	WHERE o.job_id = $1 ORDER BY o.seq`

// scanOutputs reads outputsQuery's rows and closes them.
func scanOutputs(rows pgx.Rows) ([]storage.Output, error) {
	defer rows.Close()
	outputs := []storage.Output{}
	for rows.Next() {
		var o storage.Output
		var err error
		if o.Asset, err = scanAsset(rows, &o.NodeID, &o.Name, &o.Type, &o.Folder); err != nil {
			return nil, mapErr("read job output", err)
		}
		outputs = append(outputs, o)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("read job outputs", err)
	}
	return outputs, nil
}

// queryJobs reads jobs (without outputs) in the query's order.
func queryJobs(ctx context.Context, q querier, query string, args ...any) ([]storage.Job, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, mapErr("list jobs", err)
	}
	defer rows.Close()
	var jobs []storage.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, mapErr("list jobs", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("list jobs", err)
	}
	return jobs, nil
}

// scanJob reads one row in jobColumns order, then into extra (columns the
// query selects after jobColumns).
func scanJob(row pgx.Row, extra ...any) (storage.Job, error) {
	var (
		j                                 storage.Job
		workflow                          string
		progress, jobErr                  *string
		perJob, perSecond, reserved, paid *int64
	)
	dest := append([]any{&j.ID, &j.AccountID, &j.Pool, &j.Status, &workflow, &j.CreatedAt, &j.StartedAt,
		&j.CompletedAt, &j.ExpiresAt, &progress, &jobErr, &j.Attempt, &j.DeploymentID,
		&perJob, &perSecond, &reserved, &paid}, extra...)
	if err := row.Scan(dest...); err != nil {
		return storage.Job{}, err
	}
	if reserved != nil {
		j.Credits = &storage.JobCredits{PerJob: deref(perJob), PerSecond: deref(perSecond), Reserved: *reserved, Charged: paid}
	}
	j.Workflow = json.RawMessage(workflow)
	if progress != nil {
		j.Progress = json.RawMessage(*progress)
	}
	if jobErr != nil {
		j.Error = json.RawMessage(*jobErr)
	}
	j.CreatedAt = j.CreatedAt.UTC()
	j.ExpiresAt = j.ExpiresAt.UTC()
	j.StartedAt = utcPtr(j.StartedAt)
	j.CompletedAt = utcPtr(j.CompletedAt)
	return j, nil
}

// releaseOutputRows prepares the account's asset id for deletion inside tx:
// storage.ErrInUse while a job that has not expired holds it as an output;
// otherwise the output rows of expired jobs that name it are deleted (the
// caller's rollback restores them if the asset delete then fails).
func releaseOutputRows(ctx context.Context, tx pgx.Tx, accountID, id string) error {
	var held bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets
		WHERE id = $1 AND account_id = $2 AND `+assetHeldByJob("now()")+`)`, id, accountID).Scan(&held); err != nil {
		return mapErr("check asset in use", err)
	}
	if held {
		return fmt.Errorf("postgres: delete asset: %w", storage.ErrInUse)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM job_outputs WHERE asset_id = $1
		AND EXISTS (SELECT 1 FROM assets WHERE id = $1 AND account_id = $2)`, id, accountID); err != nil {
		return mapErr("release asset outputs", err)
	}
	return nil
}

// deref is *p, or 0 for nil.
func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// leaseInterval renders a lease for SQL arithmetic on the database clock.
func leaseInterval(d time.Duration) int64 { return d.Microseconds() }
