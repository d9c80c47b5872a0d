package ingest

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/zeebo/blake3"
)

// The upload benchmarks default to the contract's ~100 MB single request.
// Set COMFYGATE_BENCH_UPLOAD_MIB to change the file size, for example
//
//	COMFYGATE_BENCH_UPLOAD_MIB=16 go test -run '^$' -bench . ./internal/ingest/
//
// Compare BenchmarkParse100MiB with BenchmarkNaiveMultipart100MiB: both hash,
// write and fsync the file part; only the buffering differs.
const benchSizeEnv = "COMFYGATE_BENCH_UPLOAD_MIB"

var (
	benchOnce sync.Once
	benchData []byte
	benchCT   string
)

// benchBody builds (once) a multipart body whose file part has the
// configured size.
func benchBody(b *testing.B) ([]byte, string) {
	b.Helper()
	benchOnce.Do(func() {
		mib := 100
		if v := os.Getenv(benchSizeEnv); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				b.Fatalf("%s=%q: want a positive integer", benchSizeEnv, v)
			}
			mib = n
		}
		benchData, benchCT = buildBody(b,
			text("content_type", "application/octet-stream"),
			text("file_path", "bench/random.bin"),
			file(pseudoRandom(mib<<20)))
	})
	return benchData, benchCT
}

// BenchmarkParse100MiB is Parse from memory into a blob store in a temp dir,
// Finish (fsync) included.
func BenchmarkParse100MiB(b *testing.B) {
	body, ct := benchBody(b)
	s := newStore(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, err := Parse(context.Background(), bytes.NewReader(body), ct, s, Limits{MaxBytes: int64(len(body))})
		if err != nil {
			b.Fatal(err)
		}
		_ = req.Upload.Abort()
	}
}

// BenchmarkNaiveMultipart100MiB is the baseline research/perf.md §4
// measured: what r.MultipartReader() gives (multipart.NewReader straight on
// the body), NextPart, then io.CopyBuffer into blake3 and a file, then fsync.
// Each Part.Read yields at most 4 KiB, so hashing and file writes happen
// 4 KiB at a time.
func BenchmarkNaiveMultipart100MiB(b *testing.B) {
	body, ct := benchBody(b)
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	copyBuf := make([]byte, 256<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if part.FormName() != "file" {
				if _, err := io.ReadAll(part); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if err := naiveStore(dir, part, copyBuf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func naiveStore(dir string, part io.Reader, buf []byte) error {
	f, err := os.CreateTemp(dir, "naive-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := blake3.New()
	if _, err := io.CopyBuffer(io.MultiWriter(h, f), part, buf); err != nil {
		return err
	}
	_ = h.Sum(nil)
	return f.Sync()
}

// BenchmarkParseHTTP100MiB sends the body over loopback TCP to a real
// net/http server whose handler runs Parse, as the Caddy module will: the
// closest in-process stand-in for `curl -F file=@...` in research/perf.md §4.
func BenchmarkParseHTTP100MiB(b *testing.B) {
	body, ct := benchBody(b)
	s := newStore(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := Parse(r.Context(), r.Body, r.Header.Get("Content-Type"), s, Limits{MaxBytes: int64(len(body))})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = req.Upload.Abort()
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{WriteBufferSize: 256 << 10}}
	url := "http://" + ln.Addr().String() + "/"
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		resp, err := client.Post(url, ct, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
