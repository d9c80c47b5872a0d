// Package apikey mints and verifies account API keys. A key is
// "cgk_<id>_<secret>": the id finds the record, and only the SHA-256 digest
// of the secret is stored and compared, in constant time. Unknown, revoked
// and malformed keys all fail the same way.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/comfygate/comfygate/storage"
)

const prefix = "cgk_"

// ErrInvalid is every verification failure, deliberately undistinguished.
var ErrInvalid = errors.New("apikey: invalid key")

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return enc.EncodeToString(b)
}

// Digest is the stored form of a secret.
func Digest(secret string) []byte {
	d := sha256.Sum256([]byte(secret))
	return d[:]
}

// Create mints a key for account and stores its digest. The returned token
// is shown once and never stored.
func Create(ctx context.Context, st storage.APIKeyStore, account, name string) (storage.APIKey, string, error) {
	if account == "" {
		return storage.APIKey{}, "", errors.New("apikey: account is required")
	}
	k := storage.APIKey{ID: random(10), AccountID: account, Name: name, CreatedAt: time.Now().UTC()}
	secret := random(20)
	if err := st.CreateAPIKey(ctx, k, Digest(secret)); err != nil {
		return storage.APIKey{}, "", fmt.Errorf("storing api key: %w", err)
	}
	return k, prefix + k.ID + "_" + secret, nil
}

// Split parses a token into id and secret.
func Split(token string) (id, secret string, ok bool) {
	rest, found := strings.CutPrefix(token, prefix)
	if !found {
		return "", "", false
	}
	id, secret, found = strings.Cut(rest, "_")
	if !found || id == "" || secret == "" || len(token) > 256 {
		return "", "", false
	}
	return id, secret, true
}

// Verify returns the key a token names. Any failure to verify is ErrInvalid;
// a storage failure is returned wrapped so that it is not mistaken for a bad key.
func Verify(ctx context.Context, st storage.APIKeyStore, token string) (storage.APIKey, error) {
	id, secret, ok := Split(token)
	if !ok {
		return storage.APIKey{}, ErrInvalid
	}
	k, digest, err := st.APIKeyDigest(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		// Compare anyway so a missing id costs what a wrong secret does.
		subtle.ConstantTimeCompare(Digest(secret), make([]byte, sha256.Size))
		return storage.APIKey{}, ErrInvalid
	}
	if err != nil {
		return storage.APIKey{}, fmt.Errorf("looking up api key: %w", err)
	}
	if subtle.ConstantTimeCompare(Digest(secret), digest) != 1 {
		return storage.APIKey{}, ErrInvalid
	}
	return k, nil
}
