package storage

import (
	"errors"
	"testing"
)

func TestAdmit(t *testing.T) {
	tests := []struct {
		name      string
		a         Admission
		wantBound string // "" admitted
		wantLimit int
	}{
		{"unbounded", Admission{PoolQueued: 1e6, AccountQueued: 1e6, Accounts: 1}, "", 0},
		{"below max_queued, any account", Admission{MaxQueued: 200, PoolQueued: 199, AccountQueued: 199, Accounts: 1}, "", 0},
		{"a lone account at max_queued", Admission{MaxQueued: 200, PoolQueued: 200, AccountQueued: 200, Accounts: 1}, BoundMaxQueued, 200},
		{"a first job on a full pool", Admission{MaxQueued: 200, PoolQueued: 200}, "", 0},
		{"under its share in the overflow", Admission{MaxQueued: 200, PoolQueued: 201, AccountQueued: 1, Accounts: 2}, "", 0},
		{"at its share", Admission{MaxQueued: 200, PoolQueued: 290, AccountQueued: 100, Accounts: 2}, BoundFairShare, 100},
		{"the holder over its share", Admission{MaxQueued: 200, PoolQueued: 205, AccountQueued: 200, Accounts: 2}, BoundFairShare, 100},
		{"fifty accounts share 4", Admission{MaxQueued: 200, PoolQueued: 250, AccountQueued: 4, Accounts: 50}, BoundFairShare, 4},
		{"fifty accounts, under the share", Admission{MaxQueued: 200, PoolQueued: 250, AccountQueued: 3, Accounts: 50}, "", 0},
		{"more accounts than places: share 1", Admission{MaxQueued: 10, PoolQueued: 12, AccountQueued: 1, Accounts: 30}, BoundFairShare, 1},
		{"overflow used: under the share refused", Admission{MaxQueued: 200, PoolQueued: 300, AccountQueued: 5, Accounts: 3}, BoundOverflow, 300},
		{"overflow used: a first job admitted", Admission{MaxQueued: 200, PoolQueued: 399}, "", 0},
		{"ceiling: a first job refused", Admission{MaxQueued: 200, PoolQueued: 400}, BoundCeiling, 400},
		{"account_max_queued first", Admission{MaxQueued: 200, AccountMaxQueued: 3, PoolQueued: 3, AccountQueued: 3, Accounts: 1}, BoundAccountMaxQueued, 3},
		{"account_max_queued under it, pool full", Admission{MaxQueued: 5, AccountMaxQueued: 3, PoolQueued: 5, AccountQueued: 1, Accounts: 2}, "", 0},
		{"max_queued 1: the holder", Admission{MaxQueued: 1, PoolQueued: 1, AccountQueued: 1, Accounts: 1}, BoundMaxQueued, 1},
		{"max_queued 1: a first job", Admission{MaxQueued: 1, PoolQueued: 1}, "", 0},
		{"max_queued 1: at the ceiling", Admission{MaxQueued: 1, PoolQueued: 2}, BoundCeiling, 2},
	}
	for _, tc := range tests {
		err := Admit(tc.a)
		if tc.wantBound == "" {
			if err != nil {
				t.Errorf("%s: %v, want admitted", tc.name, err)
			}
			continue
		}
		bound, limit, ok := QueueBound(err)
		if !ok || bound != tc.wantBound || limit != tc.wantLimit || !errors.Is(err, ErrQueueFull) {
			t.Errorf("%s: %v (%s %d), want %s %d", tc.name, err, bound, limit, tc.wantBound, tc.wantLimit)
		}
		if got := errors.Is(err, ErrAccountQueueFull); got != (tc.wantBound == BoundAccountMaxQueued) {
			t.Errorf("%s: errors.Is(ErrAccountQueueFull) = %v", tc.name, got)
		}
	}
}

func TestNeedsAccounts(t *testing.T) {
	for _, tc := range []struct {
		a    Admission
		want bool
	}{
		{Admission{MaxQueued: 10, PoolQueued: 9, AccountQueued: 3}, false},
		{Admission{MaxQueued: 10, PoolQueued: 10, AccountQueued: 0}, false},
		{Admission{MaxQueued: 10, PoolQueued: 10, AccountQueued: 1}, true},
		{Admission{MaxQueued: 10, PoolQueued: 20, AccountQueued: 1}, false},
		{Admission{PoolQueued: 10, AccountQueued: 1}, false},
	} {
		if got := tc.a.NeedsAccounts(); got != tc.want {
			t.Errorf("%+v: NeedsAccounts = %v, want %v", tc.a, got, tc.want)
		}
	}
}
