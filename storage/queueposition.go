package storage

// Queue position at scale. A job's queue position is its 1-based place
// among its pool's queued jobs in claim order (turn, CreatedAt, ID). A
// B-tree cannot rank, so an exact position costs a count of the jobs ahead:
// O(position), 61 ms for a job at the back of 500 000 queued jobs, paid on
// every poll. The stores therefore count exactly only up to
// ExactQueuePositions jobs ahead (an index range read of at most that many
// entries, however long the queue), and beyond it report
// EstimateQueuePosition: an estimate from three reads that cost the same at
// any queue length (the pool's maintained queued count and its front and
// back turns, one index probe each).
//
// Every read is made in one snapshot (one statement, or one read
// transaction), so concurrent claims, cancels and submissions move the
// answer as they commit and never make it inconsistent: a position read
// exactly is the place the job had in that snapshot; an estimated one is
// never at or below ExactQueuePositions (the count saw that many ahead)
// and never above the queue's length.
//
// The estimate assumes the queued jobs spread evenly over the turns from
// the front to the back. Under the fair-share rule each account takes
// consecutive turns, so with one deep account (the common backlog) every
// turn holds one job and the estimate is exact; with k accounts queueing
// alike every turn holds ~k jobs and it is again close. It errs where
// accounts' backlogs differ in depth, by the share of turns that hold fewer
// jobs than average, and still falls as the queue ahead drains.

// ExactQueuePositions is how many jobs ahead the stores count exactly.
const ExactQueuePositions = 1000

// EstimateQueuePosition is the 1-based queue position reported for a job
// at turn when at least ExactQueuePositions jobs are ahead of it: the jobs
// at the turns from front (the pool's lowest queued turn) to just before
// turn, at the pool's mean density of queued jobs per turn (queued over
// back-front+1), bounded below by ExactQueuePositions+1 and above by
// queued.
func EstimateQueuePosition(turn, front, back, queued int64) int {
	span := back - front + 1
	if span < 1 {
		span = 1
	}
	ahead := int64(0)
	if turn > front {
		ahead = (turn - front) * queued / span
	}
	pos := ahead + 1
	if pos > queued {
		pos = queued
	}
	if pos < ExactQueuePositions+1 {
		pos = ExactQueuePositions + 1
	}
	return int(pos)
}
