package bench

import (
	"bytes"
	cryptorand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
)

const mib = 1 << 20

// uploadGlobals are the comfygate options of the two gateway backends,
// with the upload limit raised above the largest test file.
func uploadGlobals(t *testing.T) map[string]string {
	return map[string]string{
		"embedded": "storage embedded ./data\n\t\tmax_upload_size 600MiB",
		"postgres": fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\tblobs file_system ./data/blobs\n\t\tmax_upload_size 600MiB",
			pgtest.DSN(t), pgtest.RedisURL(t)),
	}
}

// randomFile writes size random bytes to a file in /dev/shm (the temp dir
// when there is none), removed when the test ends.
func randomFile(t *testing.T, size int) string {
	t.Helper()
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = t.TempDir()
	}
	f, err := os.CreateTemp(dir, "comfygate-bench-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	var seed [32]byte
	cryptorand.Read(seed[:])
	src := rand.NewChaCha8(seed)
	buf := make([]byte, mib)
	for left := size; left > 0; left -= len(buf) {
		n := min(left, len(buf))
		src.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// freshen rewrites the file's first bytes so that each gateway upload is a
// new blob (the blob store deduplicates identical content).
func freshen(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 64)
	cryptorand.Read(head)
	if _, err := f.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
}

// curlUpload posts path as the file part after the metadata parts (and
// any extra -F fields, such as expected_hash), the way the contract wants
// them, and returns the seconds curl reports.
func curlUpload(t *testing.T, url, path string, extra ...string) float64 {
	t.Helper()
	args := []string{"-sS", "-o", "/dev/null", "-H", "Expect:",
		"-F", "content_type=application/octet-stream", "-F", "file_path=bench/" + filepath.Base(path)}
	for _, f := range extra {
		args = append(args, "-F", f)
	}
	args = append(args, "-F", "file=@"+path+";type=application/octet-stream",
		"-w", "%{http_code} %{time_total}", url)
	return curlSeconds(t, url, args, 200, 201)
}

// curlSeconds runs curl with args (which end in -w "%{http_code}
// %{time_total}") and returns the seconds, failing unless the status is one
// of ok.
func curlSeconds(t *testing.T, url string, args []string, ok ...int) float64 {
	t.Helper()
	out, err := exec.Command("curl", args...).Output()
	if err != nil {
		t.Fatalf("curl %s: %v", url, err)
	}
	var code int
	var secs float64
	if _, err := fmt.Sscan(string(out), &code, &secs); err != nil || !slices.Contains(ok, code) {
		t.Fatalf("curl %s: %q (%v)", url, out, err)
	}
	return secs
}

var ddSeconds = regexp.MustCompile(`copied, ([0-9.]+) s`)

// ddWrite copies path into dir with fdatasync and returns dd's own seconds.
func ddWrite(t *testing.T, path, dir string) float64 {
	t.Helper()
	out := filepath.Join(dir, "dd.out")
	defer os.Remove(out)
	var stderr bytes.Buffer
	cmd := exec.Command("dd", "if="+path, "of="+out, "bs=1M", "conv=fdatasync")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dd: %v: %s", err, stderr.String())
	}
	m := ddSeconds.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("dd output: %s", stderr.String())
	}
	secs, _ := strconv.ParseFloat(m[1], 64)
	return secs
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// uploadTarget is one way of writing the benchmark file somewhere: it
// returns the seconds the write took.
type uploadTarget struct {
	name  string
	write func(t *testing.T, file string) float64
}

// TestBenchUploadThroughput: one 100 MiB multipart upload (with fsync) to
// the gateway on embedded and on Postgres storage, against dd with
// fdatasync of the same bytes on the same disk and a naive mime/multipart
// server; and the same upload to the gateway with blobs in S3 (without and
// with expected_hash) against a PutObject of the same bytes straight to the
// same S3 server; all in interleaved rounds of one run.
// COMFYGATE_BENCH_BASE_BIN adds the embedded and S3 gateways of another
// binary (the main branch's) as targets, for a same-run comparison;
// COMFYGATE_BENCH_TARGETS (comma-separated names) keeps only those targets.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchUploadThroughput ./tests/bench/
func TestBenchUploadThroughput(t *testing.T) {
	requireBench(t)
	size := envInt("COMFYGATE_BENCH_UPLOAD_MIB", 100) * mib
	rounds := envInt("COMFYGATE_BENCH_ROUNDS", 8)
	file := randomFile(t, size)
	curlTo := func(url string) func(*testing.T, string) float64 {
		return func(t *testing.T, f string) float64 { return curlUpload(t, url, f) }
	}
	naive := startServer(t, "naive-upload", "COMFYGATE_BENCH_DIR="+t.TempDir()) + "/upload"
	targets := []uploadTarget{{name: "naive", write: curlTo(naive)}}
	var ddDir string
	for _, name := range []string{"embedded", "postgres"} {
		g, _ := startGateway(t, uploadGlobals(t)[name])
		targets = append(targets, uploadTarget{name: name, write: curlTo(g.URL + "/api/v2/assets")})
		ddDir = g.Dir // dd writes next to a gateway's data: the same disk
	}
	targets = append(targets, uploadTarget{name: "dd", write: func(t *testing.T, f string) float64 { return ddWrite(t, f, ddDir) }})
	if base := os.Getenv("COMFYGATE_BENCH_BASE_BIN"); base != "" {
		g, _ := startGatewayBin(t, base, uploadGlobals(t)["embedded"])
		targets = append(targets, uploadTarget{name: "embedded@base", write: curlTo(g.URL + "/api/v2/assets")})
	}
	targets = append(targets, s3UploadTargets(t)...)
	if only := os.Getenv("COMFYGATE_BENCH_TARGETS"); only != "" {
		names := strings.Split(only, ",")
		targets = slices.DeleteFunc(targets, func(tg uploadTarget) bool { return !slices.Contains(names, tg.name) })
	}
	ratios := [][2]string{{"embedded", "dd"}, {"postgres", "dd"}, {"embedded", "naive"}, {"postgres", "naive"},
		{"embedded", "embedded@base"}, {"s3 gateway", "s3 direct"}, {"s3 gateway (expected_hash)", "s3 direct"},
		{"s3 gateway", "s3 minio-go PutObject"}, {"s3 gateway (expected_hash)", "s3 minio-go PutObject"},
		{"s3 gateway (expected_hash)", "s3 minio-go one PUT"},
		{"s3 gateway", "s3 gateway@base"}, {"s3 gateway (expected_hash)", "s3 gateway (expected_hash)@base"},
		{"s3 gateway", "s3 gateway (expected_hash)"}}

	mbps := map[string][]float64{}
	ratio := map[[2]string][]float64{}
	for r := 0; r < rounds; r++ {
		quiet(t)
		secs := map[string]float64{}
		// A fresh order each round: a write's speed depends on what was
		// written just before it (even after sync and a pause), so no
		// target may always follow the same one.
		order := rand.New(rand.NewPCG(uint64(r), 42)).Perm(len(targets))
		for _, i := range order {
			tg := targets[i]
			freshen(t, file)
			// Start each write from the same disk state: the previous
			// target's dirty pages flushed, and a moment of quiet (the
			// first write after a pause is markedly faster on this VM).
			syscall.Sync()
			time.Sleep(time.Second)
			secs[tg.name] = tg.write(t, file)
			mbps[tg.name] = append(mbps[tg.name], float64(size)/secs[tg.name]/1e6)
		}
		var line strings.Builder
		for _, tg := range targets {
			fmt.Fprintf(&line, "%s %.0f, ", tg.name, float64(size)/secs[tg.name]/1e6)
		}
		for _, k := range ratios {
			if a, b := secs[k[0]], secs[k[1]]; a > 0 && b > 0 {
				ratio[k] = append(ratio[k], b/a)
			}
		}
		t.Logf("round %d (load %s): %sMB/s", r+1, loadAverage(), line.String())
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d MiB upload, %d interleaved rounds, MB/s (1e6 bytes/s): median [min–max]\n", size/mib, rounds)
	for _, tg := range targets {
		xs := mbps[tg.name]
		fmt.Fprintf(&sb, "| %s | %.0f [%.0f–%.0f] |\n", tg.name, Median(xs), slicesMin(xs), slicesMax(xs))
	}
	fmt.Fprintf(&sb, "per-round ratios, time of the second over time of the first (median [min–max]):\n")
	for _, k := range ratios {
		if xs := ratio[k]; len(xs) > 0 {
			fmt.Fprintf(&sb, "| %s / %s | %.2f [%.2f–%.2f] |\n", k[0], k[1], Median(xs), slicesMin(xs), slicesMax(xs))
		}
	}
	t.Log(sb.String())
}

// loadAverage is the first field of /proc/loadavg.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// TestBenchUploadRSS: the gateway's peak RSS growth during one upload, each
// on a fresh gateway: 100 MiB and 400 MiB on the file-system backends,
// 100 MiB and 1 GiB into S3 (without and with expected_hash).
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchUploadRSS ./tests/bench/
func TestBenchUploadRSS(t *testing.T) {
	requireBench(t)
	small := randomFile(t, mib)
	files := map[int]string{}
	var sb strings.Builder
	sb.WriteString("\n| backend | file | VmRSS before | VmHWM before | VmHWM after | peak growth (HWM after − RSS before) |\n")
	for _, c := range []struct {
		backend  string
		sizesMiB []int
	}{
		{"embedded", []int{100, 400}}, {"postgres", []int{100, 400}},
		{"s3", []int{100, 1024}}, {"s3 (expected_hash)", []int{100, 1024}},
	} {
		for _, sizeMiB := range c.sizesMiB {
			if files[sizeMiB] == "" {
				files[sizeMiB] = randomFile(t, sizeMiB*mib)
			}
			file := files[sizeMiB]
			global := uploadGlobals(t)[c.backend]
			if strings.HasPrefix(c.backend, "s3") {
				global = s3Global(t, s3test.Bucket(t))
			}
			var extra []string
			if strings.HasSuffix(c.backend, "(expected_hash)") {
				freshen(t, file)
				extra = append(extra, "expected_hash="+fileHash(t, file))
			}
			g, pid := startGateway(t, global)
			url := g.URL + "/api/v2/assets"
			curlUpload(t, url, small) // open storage and warm the handler
			time.Sleep(time.Second)
			rss0, hwm0 := mustKB(t, pid, "VmRSS"), mustKB(t, pid, "VmHWM")
			curlUpload(t, url, file, extra...)
			hwm1 := mustKB(t, pid, "VmHWM")
			fmt.Fprintf(&sb, "| %s | %d MiB | %.1f MiB | %.1f MiB | %.1f MiB | **%.1f MiB** |\n", c.backend, sizeMiB,
				float64(rss0)/1024, float64(hwm0)/1024, float64(hwm1)/1024, float64(hwm1-rss0)/1024)
			g.Stop()
		}
	}
	t.Log(sb.String())
}

func slicesMin(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func slicesMax(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
