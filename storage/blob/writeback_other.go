//go:build !(linux && (amd64 || arm64))

package blob

import "os"

// startWriteback is a no-op where sync_file_range is unavailable; Finish's
// fsync still makes the data durable, only less of it overlaps the upload.
func startWriteback(*os.File, int64, int64) {}
