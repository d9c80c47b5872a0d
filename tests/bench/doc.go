// Package bench holds comfygate's performance measurements: each one runs
// the real gateway binary and a baseline in the same run, on loopback, for
// a bounded time, and prints a table for BENCHMARKS.md.
//
// They are measurements, not checks, and take minutes, so they skip unless
// COMFYGATE_BENCH=1:
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 30m -v -run 'Bench' ./tests/bench/
//
// The non-test files are the reusable parts: /proc readers for a process's
// memory and CPU time, an open-loop load generator, and percentile helpers.
package bench
