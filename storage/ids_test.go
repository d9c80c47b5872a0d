package storage

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestNewIDTimeOrdered: ids are UUIDv7 carrying their creation time, and
// each sorts after the one made before it (the property the primary-key
// indexes rely on), also within one millisecond.
func TestNewIDTimeOrdered(t *testing.T) {
	before := time.Now().Add(-time.Millisecond)
	prev := ""
	for i := 0; i < 10000; i++ {
		id := NewID()
		u, err := uuid.Parse(id)
		if err != nil || u.String() != id {
			t.Fatalf("id %q is not a canonical UUID: %v", id, err)
		}
		if u.Version() != 7 {
			t.Fatalf("id %s is version %d, want 7", id, u.Version())
		}
		sec, nsec := u.Time().UnixTime()
		if at := time.Unix(sec, nsec); at.Before(before) || at.After(time.Now().Add(time.Millisecond)) {
			t.Fatalf("id %s carries time %v, made between %v and now", id, at, before)
		}
		if id <= prev {
			t.Fatalf("id %s made after %s sorts before it", id, prev)
		}
		prev = id
	}
}
