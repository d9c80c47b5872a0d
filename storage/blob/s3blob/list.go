package s3blob

import (
	"context"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/blob"
)

// List returns up to limit published objects after after, in ascending
// order of their keys: those under <prefix>blobs/ (listed by Key), then
// those at an address under <prefix>objects/ (listed by Hash; keys there
// sort as the addresses do). Keys that are neither (nothing this store
// writes) are skipped.
func (s *Store) List(ctx context.Context, after blob.Ref, limit int) ([]blob.Ref, error) {
	if limit <= 0 {
		return nil, nil
	}
	start := ""
	if after != (blob.Ref{}) {
		if after.Key != "" {
			after.Hash = "" // a listed Ref names its object by Key alone
		}
		key, err := s.objectKey(after)
		if err != nil {
			return nil, err
		}
		start = key
	}
	var out []blob.Ref
	for _, dir := range []string{blobDir, addressDir} {
		prefix := s.prefix + dir
		if start >= prefix+"\xff" {
			continue // after lies past this directory
		}
		opts := minio.ListObjectsOptions{Prefix: prefix, Recursive: true, MaxKeys: min(limit-len(out), 1000)}
		if start > prefix {
			opts.StartAfter = start
		}
		for obj := range s.core.ListObjectsIter(ctx, s.bucket, opts) {
			if obj.Err != nil {
				return nil, mapErr("list objects", obj.Err)
			}
			if ref, ok := s.refOf(obj.Key); ok {
				out = append(out, ref)
				if len(out) == limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// refOf is the Ref of the object at key, if it is one this store writes.
func (s *Store) refOf(key string) (blob.Ref, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix)
	if !ok {
		return blob.Ref{}, false
	}
	if isBlobKey(rest) {
		return blob.Ref{Key: rest}, true
	}
	if !strings.HasPrefix(rest, addressDir) {
		return blob.Ref{}, false
	}
	hash := blob.HashPrefix + rest[strings.LastIndexByte(rest, '/')+1:]
	if want, err := s.addressKey(hash); err != nil || want != key {
		return blob.Ref{}, false
	}
	return blob.Ref{Hash: hash}, true
}
