package postgres

// Settlement of priced jobs. Every statement that moves jobs to a terminal
// state (FinishJob, ReleaseJob, ReclaimExpired, CancelJob of a queued job,
// ExpireJobs) sets charged_credits with chargeSet and is wrapped with
// settling, so the same statement writes each priced job's settlement or
// refund entry and gives the unused reserve back to the balance. There is
// no moment at which a job has ended but is not settled, whichever process
// ends it, and since a job reaches a terminal state once, it is settled
// once (the credit_entries_job_ended index is the backstop).

// terminalSQL lists the terminal statuses for SQL.
const terminalSQL = `('succeeded', 'failed', 'canceled', 'expired')`

// chargeSet is the SET item of charged_credits for an UPDATE that moves a
// row to the status newStatus (an SQL expression over the old row) at end
// (an SQL timestamp). fault (SQL boolean) marks an end through a platform
// fault. The charge follows storage.JobCharge: per job plus per second
// (rounded up) of the attempt's running time, at most the reserve; 0 for
// a job whose attempt never started or that ended through a fault.
func chargeSet(newStatus, end, fault string) string {
	return `charged_credits = CASE
		WHEN reserved_credits IS NULL OR (` + newStatus + `) NOT IN ` + terminalSQL + ` THEN charged_credits
		WHEN attempt_started_at IS NULL OR (` + fault + `) THEN 0
		ELSE least(reserved_credits, price_per_job + (price_per_second * ` + runMS(end) + ` + 999) / 1000) END`
}

// runMS is the current attempt's running time at end, in milliseconds.
func runMS(end string) string {
	return `greatest(0, floor(extract(epoch FROM (` + end + `) - attempt_started_at) * 1000))::bigint`
}

// settling wraps update (an UPDATE jobs statement without RETURNING whose
// SET includes chargeSet) so that it returns jobColumns of the changed rows
// and settles the priced jobs it ended: one entry per job, and the unused
// reserves given back, account rows locked in account order.
func settling(update string) string {
	return `WITH moved AS (` + update + `
		RETURNING ` + jobColumns + `,
			status IN ` + terminalSQL + ` AND reserved_credits IS NOT NULL AS settles,
			CASE WHEN attempt_started_at IS NULL OR completed_at IS NULL THEN 0
				ELSE greatest(0, floor(extract(epoch FROM completed_at - attempt_started_at) * 1000))::bigint
			END AS run_ms),
	locked AS MATERIALIZED (SELECT account_id FROM credit_accounts
		WHERE account_id IN (SELECT account_id FROM moved WHERE settles)
		ORDER BY account_id FOR NO KEY UPDATE),
	entries AS (INSERT INTO credit_entries (account_id, kind, amount, charged, run_ms, job_id)
		SELECT account_id, CASE WHEN charged_credits > 0 THEN 'settlement' ELSE 'refund' END,
			reserved_credits - charged_credits, charged_credits, run_ms, id::uuid
		FROM moved WHERE settles),
	back AS (UPDATE credit_accounts a SET balance = a.balance + d.back, updated_at = now()
		FROM (SELECT account_id, sum(reserved_credits - charged_credits) AS back FROM moved
			WHERE settles GROUP BY account_id) d
		WHERE a.account_id = d.account_id AND a.account_id IN (SELECT account_id FROM locked))
	SELECT ` + jobColumnNames + ` FROM moved`
}
