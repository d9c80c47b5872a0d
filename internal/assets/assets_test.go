package assets

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"mime/multipart"
	"net/textproto"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/idem"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/embedded"
	"github.com/comfygate/comfygate/storage/memclaim"
)

// clock is a settable clock for the service's Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newService returns a Service over a fresh embedded store and blob
// directory, with a clock starting now.
func newService(t *testing.T) (*Service, *clock) {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	blobs := blob.NewFileSystem(filepath.Join(t.TempDir(), "blobs"))
	if err := blobs.Init(); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now().UTC()}
	return &Service{Store: st, Blobs: blobs, MaxUploadBytes: 1 << 20, Now: clk.Now}, clk
}

func hashOf(b []byte) string {
	sum := blake3.Sum256(b)
	return blob.HashPrefix + hex.EncodeToString(sum[:])
}

type part struct{ name, value string }

// multipartBody builds an upload body: metadata parts, then the file.
func multipartBody(t *testing.T, data []byte, parts ...part) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		if err := w.WriteField(p.name, p.value); err != nil {
			t.Fatal(err)
		}
	}
	if data != nil {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="upload.bin"`)
		h.Set("Content-Type", "application/octet-stream")
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, w.FormDataContentType()
}

// upload uploads data as filePath for account and fails the test on error.
func upload(t *testing.T, s *Service, ctx context.Context, account, filePath string, data []byte, extra ...part) Result {
	t.Helper()
	parts := append([]part{{"content_type", "image/png"}, {"file_path", filePath}}, extra...)
	body, ct := multipartBody(t, data, parts...)
	res, err := s.Upload(ctx, account, body, ct)
	if err != nil {
		t.Fatalf("Upload(%s, %s): %v", account, filePath, err)
	}
	return res
}

func wantAPIErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	e, ok := apierr.As(err)
	if !ok || e.Status != status || e.Code != code {
		t.Fatalf("error = %v, want %d %s", err, status, code)
	}
}

func blobExists(t *testing.T, s *Service, hash string) bool {
	t.Helper()
	_, err := s.Blobs.Stat(context.Background(), blob.Ref{Hash: hash})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func TestUploadDedupCreatedNew(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	data := []byte("the same bytes for everyone")
	other := []byte("different bytes")

	steps := []struct {
		name       string
		account    string
		path       string
		data       []byte
		createdNew bool
	}{
		{"first upload is new", "acct-a", "in/a.png", data, true},
		{"same account same bytes is a dedup hit", "acct-a", "in/b.png", data, false},
		{"same account same bytes same path is still a dedup hit", "acct-a", "in/a.png", data, false},
		{"other account same bytes looks new", "acct-b", "in/a.png", data, true},
		{"other account again is its own dedup hit", "acct-b", "x.png", data, false},
		{"new bytes are new", "acct-a", "in/c.png", other, true},
	}
	ids := map[string]bool{}
	for _, st := range steps {
		res := upload(t, s, ctx, st.account, st.path, st.data)
		if !res.New {
			t.Fatalf("%s: New = false; every upload mints a record", st.name)
		}
		if res.CreatedNew != st.createdNew {
			t.Fatalf("%s: CreatedNew = %v, want %v", st.name, res.CreatedNew, st.createdNew)
		}
		a := res.Asset
		if ids[a.ID] {
			t.Fatalf("%s: asset id %s reused", st.name, a.ID)
		}
		ids[a.ID] = true
		if a.AccountID != st.account || a.FilePath != st.path || a.Hash != hashOf(st.data) ||
			a.SizeBytes != int64(len(st.data)) || a.ContentType != "image/png" || a.ExpiresAt != nil {
			t.Fatalf("%s: asset = %+v", st.name, a)
		}
	}
	// Bytes are stored once.
	if !blobExists(t, s, hashOf(data)) || !blobExists(t, s, hashOf(other)) {
		t.Fatal("uploaded bytes are not in the blob store")
	}
}

func TestUploadValidation(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	data := []byte("abc")
	tests := []struct {
		name   string
		parts  []part
		data   []byte
		ct     string // overrides the body's content type when set
		status int
		code   string
	}{
		{"hash mismatch", []part{{"content_type", "image/png"}, {"file_path", "a.png"},
			{"expected_hash", hashOf([]byte("other"))}}, data, "", 409, "hash_mismatch"},
		{"expires_in below min", []part{{"content_type", "image/png"}, {"file_path", "a.png"}, {"expires_in", "59"}}, data, "", 422, "invalid_request"},
		{"expires_in above max", []part{{"content_type", "image/png"}, {"file_path", "a.png"}, {"expires_in", "604801"}}, data, "", 422, "invalid_request"},
		{"missing file", []part{{"content_type", "image/png"}, {"file_path", "a.png"}}, nil, "", 422, "invalid_request"},
		{"escaping path", []part{{"content_type", "image/png"}, {"file_path", "../a.png"}}, data, "", 422, "invalid_request"},
		{"not multipart", []part{{"content_type", "image/png"}, {"file_path", "a.png"}}, data, "application/json", 400, "invalid_request"},
		{"too large", []part{{"content_type", "image/png"}, {"file_path", "a.png"}}, bytes.Repeat([]byte("x"), 2<<20), "", 413, "payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := multipartBody(t, tt.data, tt.parts...)
			if tt.ct != "" {
				ct = tt.ct
			}
			claims := memclaim.New()
			cctx := idem.WithClaim(ctx, idem.New(claims, "acct", "key-"+tt.name, 0))
			_, err := s.Upload(cctx, "acct", body, ct)
			wantAPIErr(t, err, tt.status, tt.code)
			// Nothing was claimed: a failed parse never reaches submission.
			if ok, _ := claims.Claim(ctx, "acct", "key-"+tt.name, time.Minute); !ok {
				t.Fatal("a refused upload claimed the idempotency key")
			}
		})
	}
	if blobExists(t, s, hashOf(data)) {
		t.Fatal("refused uploads left bytes behind")
	}
}

func TestUploadIdempotencyBackstop(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	// First request claims the key in one claim store.
	ctx1 := idem.WithClaim(ctx, idem.New(memclaim.New(), "acct", "k1", 0))
	upload(t, s, ctx1, "acct", "a.png", []byte("one"))
	// The claim store is lost (a fresh one): the database backstop refuses
	// a second asset under the same key.
	ctx2 := idem.WithClaim(ctx, idem.New(memclaim.New(), "acct", "k1", 0))
	body, ct := multipartBody(t, []byte("two"), part{"content_type", "image/png"}, part{"file_path", "b.png"})
	_, err := s.Upload(ctx2, "acct", body, ct)
	wantAPIErr(t, err, 422, "idempotency_key_reuse")
	// Another account may use the same key.
	ctx3 := idem.WithClaim(ctx, idem.New(memclaim.New(), "acct-2", "k1", 0))
	upload(t, s, ctx3, "acct-2", "a.png", []byte("one"))
}

func TestUploadExpiresIn(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t)
	res := upload(t, s, ctx, "acct", "a.png", []byte("exp"), part{"expires_in", "120"})
	want := clk.Now().Add(120 * time.Second)
	if res.Asset.ExpiresAt == nil || res.Asset.ExpiresAt.Sub(want).Abs() > time.Millisecond {
		t.Fatalf("ExpiresAt = %v, want %v", res.Asset.ExpiresAt, want)
	}
	s.DefaultRetention = time.Hour
	res = upload(t, s, ctx, "acct", "b.png", []byte("exp"))
	want = clk.Now().Add(time.Hour)
	if res.Asset.ExpiresAt == nil || res.Asset.ExpiresAt.Sub(want).Abs() > time.Millisecond {
		t.Fatalf("default retention ExpiresAt = %v, want %v", res.Asset.ExpiresAt, want)
	}
}

func TestGetOpenDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	data := []byte("get open delete")
	a := upload(t, s, ctx, "acct", "a.png", data).Asset
	b := upload(t, s, ctx, "acct", "b.png", data).Asset // same bytes, second reference

	tests := []struct {
		name, account, id string
		ok                bool
	}{
		{"own", "acct", a.ID, true},
		{"other account", "other", a.ID, false},
		{"unknown uuid", "acct", uuid.NewString(), false},
		{"not a uuid", "acct", "../../etc/passwd", false},
		{"empty", "acct", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Get(ctx, tt.account, tt.id)
			if !tt.ok {
				wantAPIErr(t, err, 404, "not_found")
				_, f, err := s.Open(ctx, tt.account, tt.id)
				wantAPIErr(t, err, 404, "not_found")
				if f != nil {
					t.Fatal("Open returned a file with an error")
				}
				wantAPIErr(t, s.Delete(ctx, tt.account, tt.id), 404, "not_found")
				return
			}
			if err != nil || got.ID != a.ID || got.Hash != a.Hash {
				t.Fatalf("Get = %+v, %v", got, err)
			}
			_, f, err := s.Open(ctx, tt.account, tt.id)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			content, err := io.ReadAll(f)
			_ = f.Close()
			if err != nil || !bytes.Equal(content, data) {
				t.Fatalf("Open content = %q, %v", content, err)
			}
		})
	}

	// Deleting one of two references keeps the bytes; the last removes them.
	if err := s.Delete(ctx, "acct", a.ID); err != nil {
		t.Fatalf("Delete a: %v", err)
	}
	wantAPIErr(t, s.Delete(ctx, "acct", a.ID), 404, "not_found")
	_, err := s.Get(ctx, "acct", a.ID)
	wantAPIErr(t, err, 404, "not_found")
	if !blobExists(t, s, a.Hash) {
		t.Fatal("bytes removed while another asset references them")
	}
	if _, f, err := s.Open(ctx, "acct", b.ID); err != nil {
		t.Fatalf("Open b after deleting a: %v", err)
	} else {
		_ = f.Close()
	}
	if err := s.Delete(ctx, "acct", b.ID); err != nil {
		t.Fatalf("Delete b: %v", err)
	}
	if blobExists(t, s, a.Hash) {
		t.Fatal("bytes kept after the last reference was deleted")
	}
	if ok, _ := s.HasBlob(ctx, "acct", a.Hash); ok {
		t.Fatal("HasBlob after deleting every reference")
	}
}

func TestOpenMissingBytes(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	a := upload(t, s, ctx, "acct", "a.png", []byte("vanishing")).Asset
	if err := s.Blobs.Remove(ctx, a.Object()); err != nil {
		t.Fatal(err)
	}
	_, f, err := s.Open(ctx, "acct", a.ID)
	wantAPIErr(t, err, 404, "blob_not_found")
	if f != nil {
		t.Fatal("file returned with error")
	}
}

func TestExpiryAndSweep(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t)
	shared := []byte("shared bytes")
	short := upload(t, s, ctx, "acct", "short.png", []byte("short only"), part{"expires_in", "60"}).Asset
	sharedShort := upload(t, s, ctx, "acct", "s1.png", shared, part{"expires_in", "60"}).Asset
	sharedLong := upload(t, s, ctx, "acct", "s2.png", shared, part{"expires_in", "3600"}).Asset
	forever := upload(t, s, ctx, "acct", "f.png", []byte("forever")).Asset

	// Before expiry everything is visible and nothing is swept.
	if n, err := s.SweepExpired(ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepExpired before expiry = %d, %v", n, err)
	}
	clk.Advance(61 * time.Second)
	for _, a := range []string{short.ID, sharedShort.ID} {
		_, err := s.Get(ctx, "acct", a)
		wantAPIErr(t, err, 404, "not_found")
		_, _, err = s.Open(ctx, "acct", a)
		wantAPIErr(t, err, 404, "not_found")
	}
	for _, a := range []string{sharedLong.ID, forever.ID} {
		if _, err := s.Get(ctx, "acct", a); err != nil {
			t.Fatalf("Get unexpired %s: %v", a, err)
		}
	}

	// The sweep honours its limit, then removes the rest.
	n, err := s.SweepExpired(ctx, 1)
	if err != nil || n != 1 {
		t.Fatalf("SweepExpired(limit 1) = %d, %v", n, err)
	}
	n, err = s.SweepExpired(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("SweepExpired second pass = %d, %v", n, err)
	}
	if blobExists(t, s, short.Hash) {
		t.Fatal("unreferenced expired bytes kept")
	}
	if !blobExists(t, s, sharedLong.Hash) {
		t.Fatal("bytes still referenced by an unexpired asset were removed")
	}
	if n, err := s.SweepExpired(ctx, 100); err != nil || n != 0 {
		t.Fatalf("third sweep = %d, %v", n, err)
	}
	clk.Advance(time.Hour)
	if n, err := s.SweepExpired(ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep after the long expiry = %d, %v", n, err)
	}
	if blobExists(t, s, sharedLong.Hash) {
		t.Fatal("bytes kept after every reference expired")
	}
	if _, err := s.Get(ctx, "acct", forever.ID); err != nil {
		t.Fatalf("an asset without expiry was swept: %v", err)
	}
}

func TestContentTypeOf(t *testing.T) {
	for name, want := range map[string]string{
		"a.png": "image/png", "dir/b.jpg": "image/jpeg", "noext": "application/octet-stream", "": "application/octet-stream",
	} {
		if got := contentTypeOf(name); got != want {
			t.Errorf("contentTypeOf(%q) = %q, want %q", name, got, want)
		}
	}
}
