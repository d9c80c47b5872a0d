package jwtauth

import (
	"crypto/sha256"
	"sync"

	"github.com/golang-jwt/jwt/v5"
)

// A client sends the same token on every call until it expires, and the
// signature check, base64 and JSON decoding of a token are the same work
// every time (about 20 µs for HS256, several times that for RSA). So a
// Verifier remembers the tokens whose signature it has verified, keyed by
// their SHA-256: a remembered token still goes through every claim check
// (exp, nbf, iat, iss, aud against the time of this call), only the
// decoding and the signature check are skipped. The keys and options of a
// Verifier never change (a new configuration builds a new Verifier), so a
// signature once valid stays valid for it.

// cacheSize bounds the remembered tokens of one Verifier.
const cacheSize = 4096

type verified struct {
	mc     jwt.MapClaims // decoded claims, read only
	claims Claims
	err    error // nil or ErrNotEnabled: extract's verdict on mc
}

type tokenCache struct {
	mu sync.RWMutex
	m  map[[sha256.Size]byte]*verified
}

func (c *tokenCache) get(k [sha256.Size]byte) *verified {
	c.mu.RLock()
	v := c.m[k]
	c.mu.RUnlock()
	return v
}

func (c *tokenCache) put(k [sha256.Size]byte, v *verified) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[sha256.Size]byte]*verified)
	}
	if len(c.m) >= cacheSize {
		for old := range c.m { // map order is unspecified: an arbitrary victim
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}

func (c *tokenCache) drop(k [sha256.Size]byte) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}
