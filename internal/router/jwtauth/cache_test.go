package jwtauth

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestRememberedTokenStillChecksClaims: a token verified once is checked
// again on every later use against that use's time: expiry and not-before
// hold, and a not-enabled verdict is kept.
func TestRememberedTokenStillChecksClaims(t *testing.T) {
	v := baseVerifier(t, nil)
	tok := sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) {
		c["nbf"] = now.Add(-time.Minute).Unix()
	}))
	for i := range 2 { // the second round is served from the cache
		if c, err := v.Verify(tok, now); err != nil || c.Workspace != "ws-1" || len(c.Entitlements) != 1 {
			t.Fatalf("round %d: %+v %v", i, c, err)
		}
	}
	if _, err := v.Verify(tok, now.Add(2*time.Hour)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("after exp: %v, want unauthorized", err)
	}
	if _, err := v.Verify(tok, now.Add(-2*time.Minute)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("before nbf: %v, want unauthorized", err)
	}
	if _, err := v.Verify(tok, now); err != nil {
		t.Fatalf("valid again: %v", err)
	}

	off := sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["router_enabled"] = false }))
	for i := range 2 {
		if c, err := v.Verify(off, now); !errors.Is(err, ErrNotEnabled) || c.Workspace != "ws-1" {
			t.Fatalf("round %d: %+v %v, want ErrNotEnabled for ws-1", i, c, err)
		}
	}
}

// TestRejectedTokensAreNotRemembered: a bad signature, or a token that
// was not yet valid when first seen, is verified in full every time.
func TestRejectedTokensAreNotRemembered(t *testing.T) {
	v := baseVerifier(t, nil)
	early := sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) {
		c["nbf"] = now.Add(time.Minute).Unix()
	}))
	if _, err := v.Verify(early, now); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("before nbf: %v", err)
	}
	if _, err := v.Verify(early, now.Add(2*time.Minute)); err != nil {
		t.Fatalf("after nbf: %v", err)
	}
	forged := sign(t, jwt.SigningMethodHS256, "h1", []byte(secret2), nil)
	for i := range 2 {
		if _, err := v.Verify(forged, now); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("round %d: forged token: %v", i, err)
		}
	}
	if n := len(v.cache.m); n != 1 {
		t.Fatalf("%d tokens remembered, want 1 (the one that became valid)", n)
	}
}

func TestTokenCacheIsBounded(t *testing.T) {
	v := baseVerifier(t, nil)
	for i := range cacheSize + 10 {
		tok := sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["workspace_id"] = fmt.Sprint("ws-", i) }))
		if _, err := v.Verify(tok, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.cache.m); n != cacheSize {
		t.Fatalf("%d tokens remembered, want %d", n, cacheSize)
	}
}
