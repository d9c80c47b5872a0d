//go:build linux && (amd64 || arm64)

package blob

import (
	"os"
	"syscall"
)

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writeback of dirty pages
// in the range without waiting for it to complete.
const syncFileRangeWrite = 2

// startWriteback asks the kernel to begin writing a range of f to disk now,
// so that the disk works in parallel with the network and the final fsync
// only waits for the tail. It is a hint: errors are ignored, and the fsync
// in Finish is what guarantees durability.
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn() // unlike Fd, leaves the file's mode alone
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SyncFileRange(int(fd), off, n, syncFileRangeWrite)
	})
}
