package s3blob

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/blob"
)

// uploadIDMark separates an object key from a multipart upload id in a
// Leftover's name.
const uploadIDMark = "?uploadId="

// Leftovers lists the incomplete multipart uploads under <prefix>blobs/,
// <prefix>objects/ (uploads streamed to their expected address) and
// <prefix>tmp/, and the temp objects earlier releases left under
// <prefix>tmp/. An incomplete upload's Modified is when its last part
// arrived (or when it began, before any part), so an upload that is still
// streaming never looks stale.
func (s *Store) Leftovers(ctx context.Context) ([]blob.Leftover, error) {
	var out []blob.Leftover
	for obj := range s.core.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + tempDir, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("s3blob: list temp objects: %w", obj.Err)
		}
		out = append(out, blob.Leftover{Name: obj.Key, Modified: obj.LastModified})
	}
	for _, dir := range []string{blobDir, addressDir, tempDir} {
		prefix := s.prefix + dir
		uploads, err := s.incompleteUploads(ctx, prefix)
		if err != nil {
			return nil, err
		}
		out = append(out, uploads...)
	}
	return out, nil
}

// incompleteUploads lists the multipart uploads under prefix.
func (s *Store) incompleteUploads(ctx context.Context, prefix string) ([]blob.Leftover, error) {
	var out []blob.Leftover
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core.ListMultipartUploads(ctx, s.bucket, prefix, keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("s3blob: list multipart uploads: %w", err)
		}
		for _, up := range res.Uploads {
			modified, err := s.lastPartTime(ctx, up.Key, up.UploadID, up.Initiated)
			if err != nil {
				return nil, err
			}
			out = append(out, blob.Leftover{Name: up.Key + uploadIDMark + up.UploadID, Modified: modified})
		}
		if !res.IsTruncated {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// lastPartTime is the latest of since and the upload's parts' times.
func (s *Store) lastPartTime(ctx context.Context, key, uploadID string, since time.Time) (time.Time, error) {
	marker := 0
	for {
		res, err := s.core.ListObjectParts(ctx, s.bucket, key, uploadID, marker, 1000)
		if err != nil {
			var resp minio.ErrorResponse
			if errors.As(err, &resp) && resp.Code == "NoSuchUpload" {
				return since, nil // finished or aborted meanwhile
			}
			return time.Time{}, fmt.Errorf("s3blob: list parts of %s: %w", s.keyName(key), err)
		}
		for _, p := range res.ObjectParts {
			if p.LastModified.After(since) {
				since = p.LastModified
			}
		}
		if !res.IsTruncated {
			return since, nil
		}
		marker = res.NextPartNumberMarker
	}
}

// Sweep removes temp objects and aborts incomplete multipart uploads not
// modified for olderThan.
func (s *Store) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	leftovers, err := s.Leftovers(ctx)
	if err != nil {
		return 0, err
	}
	return blob.SweepStale(leftovers, olderThan, func(l blob.Leftover) error {
		key, id, isUpload := strings.Cut(l.Name, uploadIDMark)
		if !isUpload {
			return s.core.RemoveObject(ctx, s.bucket, l.Name, minio.RemoveObjectOptions{})
		}
		err := s.core.AbortMultipartUpload(ctx, s.bucket, key, id)
		var resp minio.ErrorResponse
		if errors.As(err, &resp) && resp.Code == "NoSuchUpload" {
			return blob.ErrGone // finished or aborted meanwhile
		}
		return err
	})
}
