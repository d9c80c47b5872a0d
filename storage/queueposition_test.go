package storage

import "testing"

func TestEstimateQueuePosition(t *testing.T) {
	const c = ExactQueuePositions
	for _, tc := range []struct {
		name                      string
		turn, front, back, queued int64
		want                      int
	}{
		{"one job per turn: exact", 5000, 0, 9999, 10000, 5001},
		{"one job per turn, front moved", 7000, 2000, 11999, 10000, 5001},
		{"last of one job per turn", 9999, 0, 9999, 10000, 10000},
		{"k jobs per turn", 3000, 0, 9999, 40000, 12001},
		{"never at or below the exact range", 0, 0, 9999, 40000, c + 1},
		{"never above the queue", 9999, 0, 99, 5000, 5000},
		{"one turn", 7, 7, 7, 3000, c + 1},
		{"back before front (empty read)", 10, 20, 0, 2000, c + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EstimateQueuePosition(tc.turn, tc.front, tc.back, tc.queued); got != tc.want {
				t.Errorf("EstimateQueuePosition(%d, %d, %d, %d) = %d, want %d",
					tc.turn, tc.front, tc.back, tc.queued, got, tc.want)
			}
		})
	}
}
