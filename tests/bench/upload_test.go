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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
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

// curlUpload posts path as the file part after the metadata parts, the way
// the contract wants them, and returns the seconds curl reports.
func curlUpload(t *testing.T, url, path string) float64 {
	t.Helper()
	out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-H", "Expect:",
		"-F", "content_type=application/octet-stream", "-F", "file_path=bench/"+filepath.Base(path),
		"-F", "file=@"+path+";type=application/octet-stream",
		"-w", "%{http_code} %{time_total}", url).Output()
	if err != nil {
		t.Fatalf("curl %s: %v", url, err)
	}
	var code int
	var secs float64
	if _, err := fmt.Sscan(string(out), &code, &secs); err != nil || (code != 200 && code != 201) {
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

// TestBenchUploadThroughput: one 100 MiB multipart upload (with fsync) to
// the gateway on embedded and on Postgres storage, against dd with
// fdatasync of the same bytes on the same disk and a naive mime/multipart
// server, in interleaved rounds.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchUploadThroughput ./tests/bench/
func TestBenchUploadThroughput(t *testing.T) {
	requireBench(t)
	size := envInt("COMFYGATE_BENCH_UPLOAD_MIB", 100) * mib
	rounds := envInt("COMFYGATE_BENCH_ROUNDS", 8)
	file := randomFile(t, size)
	targets := []string{"dd", "naive", "embedded", "postgres"}
	urls := map[string]string{"naive": startServer(t, "naive-upload", "COMFYGATE_BENCH_DIR="+t.TempDir()) + "/upload"}
	var ddDir string
	for name, global := range uploadGlobals(t) {
		g, _ := startGateway(t, global)
		urls[name] = g.URL + "/api/v2/assets"
		ddDir = g.Dir // dd writes next to a gateway's data: the same disk
	}
	mbps := map[string][]float64{}
	ratio := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		quiet(t)
		secs := map[string]float64{}
		// Rotate the order so no target always goes first.
		for i := range targets {
			name := targets[(i+r)%len(targets)]
			freshen(t, file)
			// Start each write from the same disk state: the previous
			// target's dirty pages flushed, and a moment of quiet (the
			// first write after a pause is markedly faster on this VM).
			syscall.Sync()
			time.Sleep(time.Second)
			if name == "dd" {
				secs[name] = ddWrite(t, file, ddDir)
			} else {
				secs[name] = curlUpload(t, urls[name], file)
			}
			mbps[name] = append(mbps[name], float64(size)/secs[name]/1e6)
		}
		for _, gw := range []string{"embedded", "postgres"} {
			ratio[gw+"/dd"] = append(ratio[gw+"/dd"], secs["dd"]/secs[gw])
			ratio[gw+"/naive"] = append(ratio[gw+"/naive"], secs["naive"]/secs[gw])
		}
		t.Logf("round %d: dd %.0f, naive %.0f, embedded %.0f, postgres %.0f MB/s", r+1,
			mbps["dd"][r], mbps["naive"][r], mbps["embedded"][r], mbps["postgres"][r])
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d MiB upload, %d interleaved rounds, MB/s (1e6 bytes/s): median [min–max]\n", size/mib, rounds)
	for _, name := range targets {
		xs := mbps[name]
		fmt.Fprintf(&sb, "| %s | %.0f [%.0f–%.0f] |\n", name, Median(xs), slicesMin(xs), slicesMax(xs))
	}
	fmt.Fprintf(&sb, "per-round ratios (median [min–max]):\n")
	for _, k := range []string{"embedded/dd", "postgres/dd", "embedded/naive", "postgres/naive"} {
		xs := ratio[k]
		fmt.Fprintf(&sb, "| %s | %.2f [%.2f–%.2f] |\n", k, Median(xs), slicesMin(xs), slicesMax(xs))
	}
	t.Log(sb.String())
}

// TestBenchUploadRSS: the gateway's peak RSS growth during one upload of
// 100 MiB and of 400 MiB, each on a fresh gateway, both backends.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchUploadRSS ./tests/bench/
func TestBenchUploadRSS(t *testing.T) {
	requireBench(t)
	small := randomFile(t, mib)
	var sb strings.Builder
	sb.WriteString("\n| backend | file | VmRSS before | VmHWM before | VmHWM after | peak growth (HWM after − RSS before) |\n")
	for _, sizeMiB := range []int{100, 400} {
		file := randomFile(t, sizeMiB*mib)
		for _, backend := range []string{"embedded", "postgres"} {
			g, pid := startGateway(t, uploadGlobals(t)[backend])
			url := g.URL + "/api/v2/assets"
			curlUpload(t, url, small) // open storage and warm the handler
			time.Sleep(time.Second)
			rss0, hwm0 := mustKB(t, pid, "VmRSS"), mustKB(t, pid, "VmHWM")
			curlUpload(t, url, file)
			hwm1 := mustKB(t, pid, "VmHWM")
			fmt.Fprintf(&sb, "| %s | %d MiB | %.1f MiB | %.1f MiB | %.1f MiB | **%.1f MiB** |\n", backend, sizeMiB,
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
