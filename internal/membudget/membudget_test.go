package membudget

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestAcquireRelease(t *testing.T) {
	type step struct {
		op    string // "take", "try", "release"
		n     int64
		ok    bool  // for take and try: whether it succeeds (take fails by timing out or over the limit)
		inUse int64 // after the step
	}
	cases := []struct {
		name  string
		limit int64
		steps []step
	}{
		{"fits exactly", 100, []step{{"take", 60, true, 60}, {"take", 40, true, 100}, {"release", 100, true, 0}}},
		{"waits while full", 100, []step{{"take", 60, true, 60}, {"take", 41, false, 60}, {"release", 60, true, 0}, {"take", 41, true, 41}}},
		{"try does not wait", 100, []step{{"take", 90, true, 90}, {"try", 20, false, 90}, {"try", 10, true, 100}}},
		{"over the whole budget", 100, []step{{"take", 101, false, 0}, {"try", 101, false, 0}}},
		{"zero is free", 1, []step{{"take", 1, true, 1}, {"take", 0, true, 1}, {"try", 0, true, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.limit)
			for i, s := range tc.steps {
				var ok bool
				switch s.op {
				case "take":
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
					ok = b.Acquire(ctx, s.n) == nil
					cancel()
				case "try":
					ok = b.TryAcquire(s.n)
				case "release":
					b.Release(s.n)
					ok = true
				}
				if ok != s.ok || b.InUse() != s.inUse {
					t.Fatalf("step %d %s %d: ok %v in use %d, want %v and %d", i, s.op, s.n, ok, b.InUse(), s.ok, s.inUse)
				}
			}
		})
	}
}

func TestAcquireOverLimitFailsAtOnce(t *testing.T) {
	err := New(10).Acquire(context.Background(), 11) // a context that never ends
	if !errors.Is(err, ErrOverLimit) {
		t.Fatalf("Acquire = %v, want ErrOverLimit", err)
	}
}

// TestWaitersAreServedInOrder: a large take that waits is not overtaken by
// smaller ones that would fit, so it cannot starve.
func TestWaitersAreServedInOrder(t *testing.T) {
	b := New(100)
	if err := b.Acquire(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	big := make(chan error, 1)
	go func() { big <- b.Acquire(context.Background(), 100) }()
	for b.sem.TryAcquire(0) { // wait until the big take is queued (TryAcquire(0) fails once someone waits)
		runtime.Gosched()
	}
	if b.TryAcquire(10) {
		t.Fatal("a small take overtook a waiting large one")
	}
	b.Release(50)
	if err := <-big; err != nil || b.InUse() != 100 {
		t.Fatalf("the waiting take: %v, in use %d", err, b.InUse())
	}
}

func TestNilBudgetIsUnbounded(t *testing.T) {
	var b *Budget
	if err := b.Acquire(context.Background(), 1<<60); err != nil || !b.TryAcquire(1<<60) || b.InUse() != 0 || b.Limit() != 0 {
		t.Fatal("a nil budget bounded something")
	}
	b.Release(1)
	b.Dropped(1 << 40)
}

func TestDroppedCollectsPastTheSlack(t *testing.T) {
	b := New(1 << 30) // slack: 64 MiB
	cases := []struct {
		dropped int64
		collect bool
	}{{32 << 20, false}, {16 << 20, false}, {16 << 20, true}, {1 << 20, false}, {64 << 20, true}}
	for i, tc := range cases {
		before := numGC()
		b.Dropped(tc.dropped)
		if collected := numGC() > before; collected != tc.collect {
			t.Errorf("drop %d (%d MiB): collected %v, want %v", i, tc.dropped>>20, collected, tc.collect)
		}
	}
}

func numGC() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}
