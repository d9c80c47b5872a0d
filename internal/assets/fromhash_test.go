package assets

import (
	"context"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func TestFromHash(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t)
	data := []byte("from-hash bytes")
	h := hashOf(data)
	orig := upload(t, s, ctx, "owner", "in/pic.png", data).Asset
	upload(t, s, ctx, "stranger-holder", "their.png", []byte("only theirs"))
	theirs := hashOf([]byte("only theirs"))

	tests := []struct {
		name       string
		account    string
		in         FromHashRequest
		status     int
		code       string
		wantNew    bool
		createdNew bool
		sameAsOrig bool
		path       string
		expiresIn  int
	}{
		{name: "identical reference returns existing", account: "owner",
			in: FromHashRequest{Hash: h, FilePath: ptr("in/pic.png")}, sameAsOrig: true, path: "in/pic.png"},
		{name: "identical reference, uncleaned path", account: "owner",
			in: FromHashRequest{Hash: h, FilePath: ptr("in//./pic.png")}, sameAsOrig: true, path: "in/pic.png"},
		{name: "uppercase hex is the same hash", account: "owner",
			in:         FromHashRequest{Hash: "blake3:" + strings.ToUpper(strings.TrimPrefix(h, "blake3:")), FilePath: ptr("in/pic.png")},
			sameAsOrig: true, path: "in/pic.png"},
		{name: "new path mints", account: "owner",
			in: FromHashRequest{Hash: h, FilePath: ptr("copies/pic.jpg"), Tags: []string{"t1"}}, wantNew: true, path: "copies/pic.jpg"},
		{name: "no path mints", account: "owner",
			in: FromHashRequest{Hash: h}, wantNew: true, path: ""},
		{name: "expires_in applied", account: "owner",
			in: FromHashRequest{Hash: h, FilePath: ptr("e.png"), ExpiresIn: ptr(60)}, wantNew: true, path: "e.png", expiresIn: 60},
		{name: "expires_in max", account: "owner",
			in: FromHashRequest{Hash: h, FilePath: ptr("e2.png"), ExpiresIn: ptr(604800)}, wantNew: true, path: "e2.png", expiresIn: 604800},
		{name: "other account's hash", account: "owner",
			in: FromHashRequest{Hash: theirs, FilePath: ptr("x.png")}, status: 404, code: "blob_not_found"},
		{name: "hash nobody holds", account: "owner",
			in: FromHashRequest{Hash: hashOf([]byte("nobody")), FilePath: ptr("x.png")}, status: 404, code: "blob_not_found"},
		{name: "stranger asks for owner's hash", account: "stranger",
			in: FromHashRequest{Hash: h, FilePath: ptr("in/pic.png")}, status: 404, code: "blob_not_found"},
		{name: "malformed hash", account: "owner", in: FromHashRequest{Hash: "sha256:abc"}, status: 422, code: "invalid_request"},
		{name: "short hash", account: "owner", in: FromHashRequest{Hash: "blake3:abcd"}, status: 422, code: "invalid_request"},
		{name: "empty hash", account: "owner", in: FromHashRequest{}, status: 422, code: "invalid_request"},
		{name: "expires_in zero", account: "owner", in: FromHashRequest{Hash: h, ExpiresIn: ptr(0)}, status: 422, code: "invalid_request"},
		{name: "expires_in 59", account: "owner", in: FromHashRequest{Hash: h, ExpiresIn: ptr(59)}, status: 422, code: "invalid_request"},
		{name: "expires_in too big", account: "owner", in: FromHashRequest{Hash: h, ExpiresIn: ptr(604801)}, status: 422, code: "invalid_request"},
		{name: "expires_in negative", account: "owner", in: FromHashRequest{Hash: h, ExpiresIn: ptr(-60)}, status: 422, code: "invalid_request"},
		{name: "escaping path", account: "owner", in: FromHashRequest{Hash: h, FilePath: ptr("../x.png")}, status: 422, code: "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := s.FromHash(ctx, tt.account, tt.in)
			if tt.code != "" {
				wantAPIErr(t, err, tt.status, tt.code)
				return
			}
			if err != nil {
				t.Fatalf("FromHash: %v", err)
			}
			if tt.sameAsOrig {
				if res.New || res.Asset.ID != orig.ID {
					t.Fatalf("identical reference: New=%v id=%s, want existing %s", res.New, res.Asset.ID, orig.ID)
				}
				return
			}
			a := res.Asset
			if !res.New || res.CreatedNew || a.ID == orig.ID {
				t.Fatalf("mint: New=%v CreatedNew=%v id=%s", res.New, res.CreatedNew, a.ID)
			}
			if a.Hash != h || a.SizeBytes != int64(len(data)) || a.FilePath != tt.path || a.AccountID != tt.account {
				t.Fatalf("minted asset = %+v", a)
			}
			if tt.expiresIn > 0 {
				want := clk.Now().Add(time.Duration(tt.expiresIn) * time.Second)
				if a.ExpiresAt == nil || a.ExpiresAt.Sub(want).Abs() > time.Millisecond {
					t.Fatalf("ExpiresAt = %v, want %v", a.ExpiresAt, want)
				}
			} else if a.ExpiresAt != nil {
				t.Fatalf("ExpiresAt = %v, want none", a.ExpiresAt)
			}
		})
	}

	// The minted copy with a .jpg name gets a content type from its name.
	got, err := s.FromHash(ctx, "owner", FromHashRequest{Hash: h, FilePath: ptr("copies/pic.jpg")})
	if err != nil || got.New || got.Asset.ContentType != "image/jpeg" {
		t.Fatalf("re-reference of the minted copy = %+v, %v", got, err)
	}
}

func TestFromHashExpiredIdenticalMintsAgain(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t)
	data := []byte("short-lived")
	orig := upload(t, s, ctx, "acct", "a.png", data, part{"expires_in", "60"}).Asset
	clk.Advance(2 * time.Minute)
	res, err := s.FromHash(ctx, "acct", FromHashRequest{Hash: hashOf(data), FilePath: ptr("a.png")})
	if err != nil {
		t.Fatalf("FromHash: %v", err)
	}
	if !res.New || res.Asset.ID == orig.ID {
		t.Fatalf("an expired identical asset was returned: %+v", res)
	}
}

func TestHasBlob(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	data := []byte("has-blob")
	upload(t, s, ctx, "acct", "a.png", data)
	tests := []struct {
		account, hash string
		want          bool
	}{
		{"acct", hashOf(data), true},
		{"other", hashOf(data), false},
		{"acct", hashOf([]byte("missing")), false},
		{"acct", "not-a-hash", false},
	}
	for _, tt := range tests {
		got, err := s.HasBlob(ctx, tt.account, tt.hash)
		if err != nil || got != tt.want {
			t.Errorf("HasBlob(%s, %s) = %v, %v; want %v", tt.account, tt.hash, got, err, tt.want)
		}
	}
}
