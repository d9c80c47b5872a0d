package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Store is the blob-store contract: immutable bytes identified by their
// blake3 digest. FileSystem implements it on a local directory and
// storage/blob/s3blob on an S3-compatible object store; both pass the
// conformance suite in storage/blob/blobtest.
//
// Bytes arrive through an Upload, which streams them into an object of its
// own (a key the store picks, or the content address when the client
// declared the hash) that is invisible until Publish makes it the blob's.
// The storage layer records where each blob's bytes are (a Ref in the
// blob's row) and decides dedup there: Publish is told the blob's recorded
// object, if any, and keeps that one when it still holds the bytes. No
// object is ever copied. Publish and Remove are called by the storage layer
// with the blob's database row locked (see storage.Publisher), which is what
// orders a create and a delete of the same bytes; the store itself only
// promises that an object is never visible half-written.
//
// Errors: a missing object wraps fs.ErrNotExist; a malformed hash is
// ErrInvalidHash, a key the store could not have written ErrInvalidKey;
// anything else (the store is down, out of space, refused the request) is
// an error the caller answers as its own failure.
type Store interface {
	// NewUpload starts an upload. ctx bounds the upload's own requests to
	// the store until Publish returns; cleanup (Abort) runs without it, so
	// that a client that goes away still has its temporary bytes removed.
	// expected, when not empty, is the hash the client declared for the
	// bytes (canonical form): a store may stream them to that hash's own
	// address, and Publish refuses bytes whose hash differs
	// (ErrHashMismatch), so that nothing ever becomes visible at an
	// address its bytes do not hash to.
	NewUpload(ctx context.Context, expected string) (Upload, error)
	// Open returns the object's bytes and size. from is where the first
	// Read is expected to start: a remote store fetches from there at once,
	// so that a store that is down is known before any response is
	// written. Seek works anywhere afterwards.
	Open(ctx context.Context, obj Ref, from int64) (io.ReadSeekCloser, int64, error)
	// Stat returns the object's size, or an error wrapping fs.ErrNotExist.
	Stat(ctx context.Context, obj Ref) (int64, error)
	// Remove deletes the object (only obj's own: the content address too
	// only when obj.Key is empty); a missing object is success.
	Remove(ctx context.Context, obj Ref) error
	// List returns up to limit of the published objects, in ascending
	// order of their keys, each after the object after names (the zero
	// Ref: from the first). An object at its content address is listed by
	// its Hash, any other by its Key alone (the store does not know its
	// hash). A caller walks the store page by page, each page starting
	// after the last object of the one before: the storage layer's orphan
	// sweep does, to find objects no blob row names.
	List(ctx context.Context, after Ref, limit int) ([]Ref, error)
	// Leftovers lists what unfinished uploads left behind: temp files,
	// temp objects, incomplete multipart uploads. Uploads in progress are
	// listed too; their Modified keeps moving.
	Leftovers(ctx context.Context) ([]Leftover, error)
	// Sweep removes the leftovers not modified for olderThan (crashes,
	// aborts that could not reach the store) and returns how many it
	// removed. Pick olderThan well above the slowest expected upload.
	Sweep(ctx context.Context, olderThan time.Duration) (int, error)
}

// Ref names the object that holds a blob's bytes: the blob's content
// address, and the object's key when the store put it somewhere other than
// that address's own key. A blob's row keeps its Ref, so the object an
// upload streamed into is where its bytes stay.
type Ref struct {
	// Hash is the blob's content address, "blake3:<hex>". It is empty only
	// in a Ref that List returned for an object with a Key.
	Hash string
	// Key is the object's key within the store (without the store's
	// prefix), or "" for the object at Hash's own address: where the
	// file_system store keeps everything, where an upload with a declared
	// hash goes, and where every object written before keys were recorded
	// lives.
	Key string
}

// String names the object in messages.
func (r Ref) String() string {
	if r.Key != "" {
		return r.Key
	}
	return r.Hash
}

// Upload is bytes on their way into a Store, hashed while they stream. It is
// used by one goroutine at a time. The caller writes the bytes (Write or
// ReadFrom), calls Finish to learn their hash, then Publish (with the
// blob's row locked) to make them the blob's. Abort must always be called
// when the caller is done, also after Publish (`defer u.Abort()`): it
// discards whatever the upload holds that did not become the blob's.
type Upload interface {
	io.Writer
	io.ReaderFrom
	// Size returns how many bytes the upload has accepted so far.
	Size() int64
	// Key is the key of the object the bytes are streamed into, which
	// Publish makes the blob's ("" when that is their content address). It
	// is known from the start, so that the storage layer can hold it
	// against its orphan sweep before the object becomes visible.
	Key() string
	// Finish ends the bytes (what is buffered is written out) and returns
	// their content address and size. It may be called again and returns
	// the same.
	Finish() (hash string, size int64, err error)
	// Publish makes the finished bytes the blob's. held is the object the
	// blob's row records (nil when these bytes are the first): when it
	// still holds the bytes, it is kept and returned, and the upload's own
	// bytes are left for Abort to discard; otherwise (nil, or gone) the
	// upload's own object becomes visible and is returned. It fails with
	// ErrHashMismatch when the upload was started with an expected hash
	// that the bytes do not have. It may be called again and returns the
	// same.
	Publish(held *Ref) (Ref, error)
	// Abort discards the upload's temporary state and its own bytes when
	// they did not become the blob's. It is idempotent and leaves a
	// published object alone.
	Abort() error
}

// Leftover is one piece of temporary state an upload left in a store.
type Leftover struct {
	// Name identifies it within the store (a file name, an object key, or
	// an object key with its multipart upload id).
	Name string
	// Modified is when it last changed.
	Modified time.Time
}

// Presigner is implemented by stores that can hand out URLs at which a
// client fetches an object directly, without the gateway.
type Presigner interface {
	// PresignGet returns a URL for the object's bytes, answered with the
	// given Content-Type, and the time until which it is valid. It is
	// local computation: no request goes to the store.
	PresignGet(obj Ref, contentType string) (url string, expires time.Time, err error)
}

// ErrHashMismatch is Publish's refusal of bytes that do not hash to the
// expected hash the upload was started with.
var ErrHashMismatch = errors.New("blob: the bytes do not match the expected hash")

// ErrInvalidKey is returned for a Ref whose Key is not one the store could
// have written. Keys come from the database; a key is never used unchecked.
var ErrInvalidKey = errors.New("blob: invalid object key")

// ErrUploadState is returned when an Upload method is called out of order
// (writing after Finish, Publish before Finish, anything after Abort).
var ErrUploadState = errors.New("blob: upload used out of order")

// RemoveFunc adapts s.Remove to the storage layer's remove step
// (storage.BlobFunc), which deletes the bytes of a blob whose last reference
// is going while the blob's row is held. It runs without ctx's
// cancellation: a client that goes away must not release the row while the
// outcome of its delete request is still unknown.
func RemoveFunc(ctx context.Context, s Store) func(obj Ref) error {
	ctx = context.WithoutCancel(ctx)
	return func(obj Ref) error { return s.Remove(ctx, obj) }
}

// ErrGone is what a SweepStale remove function returns for a leftover that
// went away by itself meanwhile (its upload finished or was aborted).
var ErrGone = errors.New("blob: leftover already gone")

// SweepStale calls remove for each leftover not modified for olderThan and
// returns how many it removed, with the joined errors of those it could
// not. It is the loop of every store's Sweep.
func SweepStale(leftovers []Leftover, olderThan time.Duration, remove func(Leftover) error) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	var errs []error
	for _, l := range leftovers {
		if !l.Modified.Before(cutoff) {
			continue
		}
		switch err := remove(l); {
		case err == nil:
			removed++
		case !errors.Is(err, ErrGone):
			errs = append(errs, fmt.Errorf("%s: %w", l.Name, err))
		}
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("blob: sweep: %w", errors.Join(errs...))
	}
	return removed, nil
}
