package storage

import "github.com/google/uuid"

// NewID returns a fresh id for a row of a table that grows without bound
// (jobs, assets): a UUIDv7, whose leading 48 bits are the time of
// creation. Inserts then land on the right-most leaf of the primary-key
// index instead of a random one; with random (v4) ids a table of a million
// jobs dirties a random index page per insert, which once the index
// outgrows the database's cache costs a page read and a full-page image in
// the WAL (BENCHMARKS.md, "Scale"). The 74 bits after the time are random,
// so ids stay unguessable to anyone without the creation time to the
// millisecond, and every read checks the account anyway.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}
