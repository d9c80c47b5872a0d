package bench

import (
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0..100, nearest rank) of xs; xs
// is sorted in place. Zero for an empty slice.
func Percentile[T int64 | float64 | time.Duration](xs []T, p float64) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	rank := int(p/100*float64(len(xs))+0.5) - 1
	rank = max(0, min(rank, len(xs)-1))
	return xs[rank]
}

// Median is Percentile(xs, 50).
func Median[T int64 | float64 | time.Duration](xs []T) T { return Percentile(xs, 50) }
