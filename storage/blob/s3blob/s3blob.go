// Package s3blob is the s3 blob store: the blob.Store contract on any
// S3-compatible object store (AWS S3, R2, GCS's S3 API, MinIO, Ceph,
// versitygw), through github.com/minio/minio-go/v7.
//
// An object store has no rename and a copy costs a second pass over every
// byte, so an upload streams straight into the object that keeps its bytes:
// a multipart upload at a fresh key under <prefix>blobs/, hashed with blake3
// as it goes, with at most three part buffers per upload (one filling, two
// in flight). Publish completes it, and the blob's database row records the
// key (content addressing lives in the database, which decides dedup): when
// the row already names an object that still holds the bytes, the new
// upload is aborted instead and the row keeps its object. When the client
// declared the hash up front (expected_hash, which the SDKs send), the
// upload goes to the hash's own address, <prefix>objects/ab/cd/<hex>, as
// every object did before keys were recorded, and is completed only if the
// bytes match. A body smaller than one part is put by Publish in one
// request. No object is ever copied server-side.
//
// An incomplete multipart upload is invisible; failed uploads are aborted,
// and what an abort cannot reach (a crash, a store that is down) is found
// by Leftovers and removed by Sweep, with the temp objects under
// <prefix>tmp/ that earlier releases wrote.
package s3blob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/comfygate/comfygate/storage/blob"
)

// Defaults and limits.
const (
	// DefaultPartSize is the multipart part size, and so a third of the
	// most memory one upload holds (partsInFlight+1 part buffers).
	DefaultPartSize = 8 << 20
	// minPartSize is S3's smallest part but the last.
	minPartSize = 5 << 20
	// maxParts is S3's most parts of one multipart upload.
	maxParts = 10000
	// MaxPresignTTL is the longest validity S3 allows a presigned URL.
	MaxPresignTTL = 7 * 24 * time.Hour
	// maxRetries bounds minio-go's retries of a failed request, so that a
	// store that is down is reported within seconds.
	maxRetries = 3
	// cleanupTimeout bounds the requests that undo an upload.
	cleanupTimeout = 30 * time.Second
)

// Config configures a Store.
type Config struct {
	// Endpoint is the store's base URL: https://host[:port] (or http://
	// for a store on a trusted network).
	Endpoint string
	// Bucket holds the objects; it must exist.
	Bucket string
	// Region is the bucket's region. Default us-east-1.
	Region string
	// Prefix is prepended to every key ("comfygate/" keeps the store's
	// keys under one folder of a shared bucket).
	Prefix string
	// AccessKey and SecretKey are the credentials.
	AccessKey string
	SecretKey string
	// PathStyle addresses the bucket in the path (host/bucket/key) instead
	// of the host name (bucket.host/key); most self-hosted stores need it.
	PathStyle bool
	// PresignTTL, when positive, is how long presigned GET URLs are valid.
	PresignTTL time.Duration
	// PublicEndpoint, when set, is the base URL at which clients reach the
	// store (https://host[:port]), for a store that the gateway reaches at
	// an address clients cannot: presigned URLs name it instead of
	// Endpoint. The signature covers the host, so whatever answers there
	// must hand requests to the store with that Host header unchanged.
	PublicEndpoint string
	// PartSize is the multipart part size. Default DefaultPartSize.
	PartSize int64
	// Timeout is how long a request may make no progress (no byte sent or
	// received, no answer) before it fails; minio-go then retries it up to
	// maxRetries times. A silent store fails a request within about
	// (maxRetries+1) × Timeout. Default DefaultTimeout.
	Timeout time.Duration
}

// MaxObjectSize is the largest upload a store with this part size (0: the
// default) takes: S3 allows 10,000 parts.
func MaxObjectSize(partSize int64) int64 {
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	return partSize * maxParts
}

// Store is a blob.Store on an S3 bucket. It is safe for concurrent use.
type Store struct {
	core       minio.Core
	signer     *minio.Client // presigns; on PublicEndpoint when set
	bucket     string
	prefix     string
	partSize   int64
	presignTTL time.Duration
}

// New returns a store for cfg. It does no I/O.
func New(cfg Config) (*Store, error) {
	u, err := parseEndpoint("endpoint", cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, errors.New("s3blob: a bucket is required")
	}
	if cfg.PresignTTL < 0 || cfg.PresignTTL > MaxPresignTTL {
		return nil, fmt.Errorf("s3blob: presign ttl must be at most %s", MaxPresignTTL)
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("s3blob: part size must be at least %d bytes", minPartSize)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("s3blob: timeout must not be negative")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	lookup := minio.BucketLookupDNS
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	secure := u.Scheme == "https"
	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("s3blob: %w", err)
	}
	transport.MaxIdleConnsPerHost = 64
	dialer := &progressDialer{timeout: cfg.Timeout, dialer: net.Dialer{KeepAlive: 30 * time.Second}}
	transport.DialContext = dialer.DialContext
	transport.ResponseHeaderTimeout = cfg.Timeout
	// An idle connection's pending read would reach its deadline after
	// Timeout; the pool lets it go before that.
	transport.IdleConnTimeout = cfg.Timeout / 2
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       secure,
		Region:       cfg.Region, // known, so presigning never asks the store
		BucketLookup: lookup,
		Transport:    transport,
		MaxRetries:   maxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3blob: %w", err)
	}
	signer := client
	if cfg.PublicEndpoint != "" {
		pub, err := parseEndpoint("public endpoint", cfg.PublicEndpoint)
		if err != nil {
			return nil, err
		}
		// A client that only presigns: with the region given it never
		// connects, so it needs no transport of its own.
		signer, err = minio.New(pub.Host, &minio.Options{
			Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
			Secure:       pub.Scheme == "https",
			Region:       cfg.Region,
			BucketLookup: lookup,
		})
		if err != nil {
			return nil, fmt.Errorf("s3blob: public endpoint: %w", err)
		}
	}
	return &Store{
		core:       minio.Core{Client: client},
		signer:     signer,
		bucket:     cfg.Bucket,
		prefix:     cfg.Prefix,
		partSize:   cfg.PartSize,
		presignTTL: cfg.PresignTTL,
	}, nil
}

// parseEndpoint checks that raw is http(s)://host[:port] and parses it.
func parseEndpoint(what, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("s3blob: %s %q must be http(s)://host[:port]", what, raw)
	}
	return u, nil
}

// Key layout under the store's prefix.
const (
	// addressDir holds objects at their content address,
	// objects/ab/cd/<hex>: uploads with a declared hash, and every object
	// written before keys were recorded.
	addressDir = "objects/"
	// blobDir holds the objects uploads without a declared hash streamed
	// into, blobs/<32 hex digits>: random, so that writes spread over the
	// store's key space.
	blobDir = "blobs/"
	// tempDir held the temp objects of earlier releases, which copied them
	// to their address; only Leftovers and Sweep still look there.
	tempDir = "tmp/"
	// blobKeyHex is how many hex digits name an object under blobDir.
	blobKeyHex = 32
)

// addressKey validates hash and returns the key of its address.
func (s *Store) addressKey(hash string) (string, error) {
	h, err := blob.ParseHash(hash)
	if err != nil || h != hash {
		return "", blob.ErrInvalidHash
	}
	hx := hash[len(blob.HashPrefix):]
	return s.prefix + addressDir + hx[0:2] + "/" + hx[2:4] + "/" + hx, nil
}

// objectKey validates obj and returns its object's full key: its Key under
// the prefix, or its hash's address.
func (s *Store) objectKey(obj blob.Ref) (string, error) {
	if obj.Key == "" {
		return s.addressKey(obj.Hash)
	}
	if obj.Hash != "" {
		if h, err := blob.ParseHash(obj.Hash); err != nil || h != obj.Hash {
			return "", blob.ErrInvalidHash
		}
	}
	if !isBlobKey(obj.Key) {
		return "", fmt.Errorf("%w: %q", blob.ErrInvalidKey, obj.Key)
	}
	return s.prefix + obj.Key, nil
}

// isBlobKey reports whether key (without the prefix) is one newBlobKey
// makes.
func isBlobKey(key string) bool {
	hx, ok := strings.CutPrefix(key, blobDir)
	if !ok || len(hx) != blobKeyHex {
		return false
	}
	for i := 0; i < len(hx); i++ {
		if c := hx[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// newBlobKey names a fresh object under blobDir: 128 random bits.
func (s *Store) newBlobKey() string {
	var b [blobKeyHex / 2]byte
	_, _ = rand.Read(b[:])
	return s.prefix + blobDir + hex.EncodeToString(b[:])
}

// NewUpload starts an upload. It does no I/O: the multipart upload begins
// when the first part is full. The parts go to a fresh key under blobs/,
// or with an expected hash to that hash's address; Publish completes the
// upload there, or aborts it when the blob's recorded object still holds
// the bytes.
func (s *Store) NewUpload(ctx context.Context, expected string) (blob.Upload, error) {
	key := ""
	if expected != "" {
		var err error
		if key, err = s.addressKey(expected); err != nil {
			return nil, err
		}
	} else {
		key = s.newBlobKey()
	}
	return newUpload(ctx, s, key, expected), nil
}

// Stat returns the object's size.
func (s *Store) Stat(ctx context.Context, obj blob.Ref) (int64, error) {
	key, err := s.objectKey(obj)
	if err != nil {
		return 0, err
	}
	info, err := s.core.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, mapErr("stat "+obj.String(), err)
	}
	return info.Size, nil
}

// Remove deletes the object; S3 answers a missing key with success too.
func (s *Store) Remove(ctx context.Context, obj blob.Ref) error {
	key, err := s.objectKey(obj)
	if err != nil {
		return err
	}
	if err := s.core.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return mapErr("remove "+obj.String(), err)
	}
	return nil
}

// PresignGet returns a presigned GET URL for the object, answered with
// contentType, and the time until which it is valid: the signing time
// rounded down to the second (as the signature records it) plus the TTL.
func (s *Store) PresignGet(obj blob.Ref, contentType string) (string, time.Time, error) {
	if s.presignTTL <= 0 {
		return "", time.Time{}, errors.New("s3blob: presign is not configured")
	}
	key, err := s.objectKey(obj)
	if err != nil {
		return "", time.Time{}, err
	}
	signedAt := time.Now().UTC().Truncate(time.Second)
	params := url.Values{}
	if contentType != "" {
		params.Set("response-content-type", contentType)
	}
	// With the region known this is local computation; ctx is unused.
	u, err := s.signer.PresignedGetObject(context.Background(), s.bucket, key, s.presignTTL, params)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("s3blob: presign %s: %w", obj, err)
	}
	return u.String(), signedAt.Add(s.presignTTL), nil
}

// Presigns reports whether the store was configured to presign URLs.
func (s *Store) Presigns() bool { return s.presignTTL > 0 }

// mapErr wraps a minio error, turning a missing key into fs.ErrNotExist.
func mapErr(op string, err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket") {
		return fmt.Errorf("s3blob: %s: %w", op, fs.ErrNotExist)
	}
	return fmt.Errorf("s3blob: %s: %w", op, err)
}

// isInvalidRange reports an S3 416 (a range starting at or past the end).
func isInvalidRange(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && (resp.Code == "InvalidRange" || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable)
}

// keyName is a key without the store's prefix: a Ref's Key, and what
// messages show.
func (s *Store) keyName(key string) string { return strings.TrimPrefix(key, s.prefix) }

var (
	_ blob.Store     = (*Store)(nil)
	_ blob.Presigner = (*Store)(nil)
)
