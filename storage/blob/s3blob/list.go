package s3blob

import (
	"context"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/blob"
)

// List returns up to limit published addresses after after, in ascending
// order: a listing of <prefix>objects/ that starts after after's key (keys
// sort as the addresses do). Keys under objects/ that are not an address
// (nothing this store writes) are skipped.
func (s *Store) List(ctx context.Context, after string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	opts := minio.ListObjectsOptions{Prefix: s.prefix + "objects/", Recursive: true, MaxKeys: min(limit, 1000)}
	if after != "" {
		key, err := s.objectKey(after)
		if err != nil {
			return nil, err
		}
		opts.StartAfter = key
	}
	var out []string
	for obj := range s.core.ListObjectsIter(ctx, s.bucket, opts) {
		if obj.Err != nil {
			return nil, mapErr("list objects", obj.Err)
		}
		if hash, ok := s.addressOf(obj.Key); ok {
			out = append(out, hash)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// addressOf is the address whose object key is key, if key is one.
func (s *Store) addressOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"objects/")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '/')
	hash := blob.HashPrefix + rest[i+1:]
	if want, err := s.objectKey(hash); err != nil || want != key {
		return "", false
	}
	return hash, true
}
