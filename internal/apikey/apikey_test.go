package apikey

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/embedded"
)

// openStore returns a migrated embedded store in a temp dir and the dir.
func openStore(t *testing.T) (*embedded.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return st, dir
}

func TestCreateAndVerify(t *testing.T) {
	ctx := context.Background()
	st, _ := openStore(t)
	k, token, err := Create(ctx, st, "acct-1", "ci key")
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if k.AccountID != "acct-1" || k.Name != "ci key" || k.ID == "" || k.CreatedAt.IsZero() {
		t.Fatalf("Create returned %+v", k)
	}
	if !strings.HasPrefix(token, "cgk_"+k.ID+"_") {
		t.Fatalf("token %q does not start with cgk_<id>_", token)
	}
	_, secret, ok := Split(token)
	if !ok {
		t.Fatalf("Split(%q) failed on a minted token", token)
	}

	// A second key for the same account gets a different id and secret.
	k2, token2, err := Create(ctx, st, "acct-1", "other")
	if err != nil {
		t.Fatalf("Create second: %v", err)
	}
	if k2.ID == k.ID || token2 == token {
		t.Fatal("two keys share an id or token")
	}

	wrongSecret := "cgk_" + k.ID + "_" + strings.Repeat("a", len(secret))
	tests := []struct {
		name    string
		token   string
		wantID  string
		invalid bool
	}{
		{"valid", token, k.ID, false},
		{"second valid", token2, k2.ID, false},
		{"wrong secret", wrongSecret, "", true},
		{"secret of another key", "cgk_" + k.ID + "_" + strings.SplitN(strings.TrimPrefix(token2, "cgk_"), "_", 2)[1], "", true},
		{"secret with extra byte", token + "a", "", true},
		{"secret truncated", token[:len(token)-1], "", true},
		{"unknown id", "cgk_zzzzzzzzzzzzzzzz_" + secret, "", true},
		{"empty", "", "", true},
		{"no prefix", strings.TrimPrefix(token, "cgk_"), "", true},
		{"upper prefix", "CGK_" + strings.TrimPrefix(token, "cgk_"), "", true},
		{"bearer included", "Bearer " + token, "", true},
		{"prefix only", "cgk_", "", true},
		{"no secret separator", "cgk_" + k.ID, "", true},
		{"empty id", "cgk__" + secret, "", true},
		{"empty secret", "cgk_" + k.ID + "_", "", true},
		{"over-long", "cgk_" + k.ID + "_" + secret + strings.Repeat("a", 300), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Verify(ctx, st, tt.token)
			if tt.invalid {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Verify(%q) = %+v, %v; want ErrInvalid", tt.token, got, err)
				}
				if got.ID != "" || got.AccountID != "" {
					t.Fatalf("Verify returned a key with an error: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify(%q): %v", tt.token, err)
			}
			if got.ID != tt.wantID || got.AccountID != "acct-1" {
				t.Fatalf("Verify = %+v, want id %s of acct-1", got, tt.wantID)
			}
		})
	}
}

func TestVerifyRevoked(t *testing.T) {
	ctx := context.Background()
	st, _ := openStore(t)
	k, token, err := Create(ctx, st, "acct-r", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, st, token); err != nil {
		t.Fatalf("Verify before revoke: %v", err)
	}
	if err := st.RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if _, err := Verify(ctx, st, token); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Verify after revoke = %v, want ErrInvalid", err)
	}
}

func TestCreateRequiresAccount(t *testing.T) {
	st, _ := openStore(t)
	if _, tok, err := Create(context.Background(), st, "", "x"); err == nil || tok != "" {
		t.Fatalf("Create without account = %q, %v; want an error and no token", tok, err)
	}
	keys, err := st.ListAPIKeys(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("a refused Create stored %d keys", len(keys))
	}
}

// failingKeys is an APIKeyStore that fails on lookup, to check a storage
// failure is not reported as an invalid key.
type failingKeys struct{ storage.APIKeyStore }

var errDown = errors.New("database is down")

func (failingKeys) APIKeyDigest(context.Context, string) (storage.APIKey, []byte, error) {
	return storage.APIKey{}, nil, errDown
}

func TestVerifyStorageFailureIsNotInvalid(t *testing.T) {
	_, err := Verify(context.Background(), failingKeys{}, "cgk_abc_def")
	if errors.Is(err, ErrInvalid) || !errors.Is(err, errDown) {
		t.Fatalf("Verify with failing store = %v; want the wrapped storage error", err)
	}
}

func TestOnlyDigestStored(t *testing.T) {
	ctx := context.Background()
	st, dir := openStore(t)
	k, token, err := Create(ctx, st, "acct-d", "digest check")
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := Split(token)

	_, digest, err := st.APIKeyDigest(ctx, k.ID)
	if err != nil {
		t.Fatalf("APIKeyDigest: %v", err)
	}
	want := sha256.Sum256([]byte(secret))
	if !bytes.Equal(digest, want[:]) || !bytes.Equal(Digest(secret), want[:]) {
		t.Fatalf("stored digest %x, want sha256(secret) %x", digest, want)
	}
	if bytes.Contains(digest, []byte(secret)) {
		t.Fatal("the stored digest contains the secret")
	}

	keys, err := st.ListAPIKeys(ctx, "acct-d")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("ListAPIKeys = %+v", keys)
	}
	for _, f := range []string{keys[0].ID, keys[0].AccountID, keys[0].Name} {
		if strings.Contains(f, secret) {
			t.Fatalf("a listed field contains the secret: %q", f)
		}
	}

	// Nothing on disk (database, WAL, shared memory) holds the secret or
	// the whole token.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s contains the plaintext secret", e.Name())
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		token      string
		id, secret string
		ok         bool
	}{
		{"cgk_abc_def", "abc", "def", true},
		{"cgk_abc_d_e", "abc", "d_e", true},
		{"cgk_abc", "", "", false},
		{"cgk__def", "", "", false},
		{"cgk_abc_", "", "", false},
		{"abc_def", "", "", false},
		{"", "", "", false},
		{"cgk_a_" + strings.Repeat("s", 256-len("cgk_a_")), "a", strings.Repeat("s", 256-len("cgk_a_")), true},
		{"cgk_a_" + strings.Repeat("s", 257-len("cgk_a_")), "", "", false},
	}
	for _, tt := range tests {
		id, secret, ok := Split(tt.token)
		if id != tt.id || secret != tt.secret || ok != tt.ok {
			t.Errorf("Split(%.40q) = %q, %q, %v; want %q, %q, %v", tt.token, id, secret, ok, tt.id, tt.secret, tt.ok)
		}
	}
}
