package bench

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
)

// s3Global is the comfygate option of a gateway on Postgres + Redis with
// its blobs in bucket (the replicas' setup), at the default part size;
// COMFYGATE_BENCH_S3_OPTIONS adds lines to the blobs s3 block, for
// experiments ("part_size 16MiB").
func s3Global(t *testing.T, bucket s3test.Config) string {
	var extra []string
	if o := os.Getenv("COMFYGATE_BENCH_S3_OPTIONS"); o != "" {
		extra = strings.Split(o, ";")
	}
	return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 2GiB",
		pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile(extra...))
}

// s3UploadTargets are the S3 targets of the upload benchmark, on a bucket
// of the test S3 server: the file sent straight to the server, as one
// PutObject request by curl and by minio-go's PutObject (the client library
// the gateway uses; with its defaults a 100 MiB file goes as a parallel
// multipart upload, and as one request with DisableMultipart), all signed
// the way the gateway signs its part uploads (UNSIGNED-PAYLOAD); and the
// file uploaded through a gateway without and with expected_hash (what the
// SDKs send): a multipart upload at a fresh key, or at the hash's address,
// completed where it is, no copy either way.
//
// It also logs, at the end of the test, the CPU time each S3 target cost
// per upload in the S3 server, the gateway and the client (curl, or this
// process for minio-go): unlike seconds, that does not depend on what else
// the machine is doing.
func s3UploadTargets(t *testing.T) []uploadTarget {
	bucket := s3test.Bucket(t)
	type gw struct {
		url string
		pid int
	}
	gateways := map[string]gw{}
	g, pid := startGateway(t, s3Global(t, bucket))
	gateways[""] = gw{g.URL + "/api/v2/assets", pid}
	names := []string{"s3 direct", "s3 minio-go PutObject", "s3 minio-go one PUT", "s3 gateway", "s3 gateway (expected_hash)"}
	if base := os.Getenv("COMFYGATE_BENCH_BASE_BIN"); base != "" {
		g, pid := startGatewayBin(t, base, s3Global(t, bucket))
		gateways["@base"] = gw{g.URL + "/api/v2/assets", pid}
		names = append(names, "s3 gateway@base", "s3 gateway (expected_hash)@base")
	}
	client := bucket.Client(t)
	// The server's process is found by its address in its arguments, or
	// by COMFYGATE_BENCH_S3_PROCESS (a part of one of them) for servers
	// started otherwise.
	match := os.Getenv("COMFYGATE_BENCH_S3_PROCESS")
	if match == "" {
		match = strings.TrimPrefix(bucket.Endpoint, "http://")
	}
	serverPID, err := PIDWithArg(match)
	if err != nil {
		t.Fatalf("the S3 server's process: %v", err)
	}
	puts := 0
	direct := map[string]func(*testing.T, string) float64{
		"s3 direct": func(t *testing.T, f string) float64 {
			puts++
			return curlPutS3(t, bucket, fmt.Sprintf("direct/%d", puts), f)
		},
		"s3 minio-go PutObject": func(t *testing.T, f string) float64 {
			puts++
			return minioPut(t, client, bucket.Bucket, fmt.Sprintf("direct/%d", puts), f, false)
		},
		// The one-request PUT again, through the client library: some
		// servers refuse curl's signature of it.
		"s3 minio-go one PUT": func(t *testing.T, f string) float64 {
			puts++
			return minioPut(t, client, bucket.Bucket, fmt.Sprintf("direct/%d", puts), f, true)
		},
	}
	cpu := map[string][][3]time.Duration{} // per upload: server, gateway, client
	var targets []uploadTarget
	for _, name := range names {
		base, isBase := strings.CutSuffix(name, "@base")
		gateway := gateways[""]
		if isBase {
			gateway = gateways["@base"]
		}
		targets = append(targets, uploadTarget{name: name, write: func(t *testing.T, f string) float64 {
			var extra []string
			if base == "s3 gateway (expected_hash)" { // hashed before the clocks start
				extra = append(extra, "expected_hash="+fileHash(t, f))
			}
			s0, g0, c0 := mustTicks(t, serverPID), mustTicks(t, gateway.pid), clientCPU()
			var secs float64
			if w := direct[name]; w != nil {
				secs = w(t, f)
			} else {
				secs = curlUpload(t, gateway.url, f, extra...)
			}
			cpu[name] = append(cpu[name], [3]time.Duration{
				mustTicks(t, serverPID) - s0, mustTicks(t, gateway.pid) - g0, clientCPU() - c0})
			return secs
		}})
	}
	t.Cleanup(func() {
		if len(cpu) == 0 {
			return // the S3 targets were left out
		}
		var sb strings.Builder
		sb.WriteString("\nCPU per upload, median (ms): | target | S3 server | gateway | client | total |\n")
		for _, tg := range targets {
			var per [4][]float64
			for _, c := range cpu[tg.name] {
				for k := range 3 {
					per[k] = append(per[k], float64(c[k].Milliseconds()))
				}
				per[3] = append(per[3], float64((c[0] + c[1] + c[2]).Milliseconds()))
			}
			if len(per[3]) > 0 {
				fmt.Fprintf(&sb, "| %s | %.0f | %.0f | %.0f | %.0f |\n", tg.name, Median(per[0]), Median(per[1]), Median(per[2]), Median(per[3]))
			}
		}
		t.Log(sb.String())
	})
	return targets
}

// mustTicks is a process's CPU time so far (10 ms resolution).
func mustTicks(t *testing.T, pid int) time.Duration {
	t.Helper()
	n, err := CPUTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n) * 10 * time.Millisecond
}

// clientCPU is the CPU time of this process and its finished children
// (curl): the client side of a write.
func clientCPU() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// curlPutS3 PUTs path as the object key of bucket with curl's SigV4 and
// returns the seconds curl reports.
func curlPutS3(t *testing.T, bucket s3test.Config, key, path string) float64 {
	t.Helper()
	url := bucket.Endpoint + "/" + bucket.Bucket + "/" + key
	return curlSeconds(t, url, []string{"-sS", "-o", "/dev/null", "-H", "Expect:",
		"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
		"--aws-sigv4", "aws:amz:" + bucket.Region + ":s3", "--user", bucket.AccessKey + ":" + bucket.SecretKey,
		"-T", path, "-w", "%{http_code} %{time_total}", url}, 200)
}

// minioPut uploads path with minio-go's PutObject (default part size and
// parallelism; one request when single) and returns the seconds it took.
func minioPut(t *testing.T, client *minio.Client, bucket, key, path string, single bool) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := client.PutObject(context.Background(), bucket, key, f, st.Size(),
		minio.PutObjectOptions{DisableContentSha256: true, DisableMultipart: single}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	return time.Since(start).Seconds()
}

// fileHash is the blake3 address of a file's bytes.
func fileHash(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := blake3.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return "blake3:" + hex.EncodeToString(h.Sum(nil))
}
