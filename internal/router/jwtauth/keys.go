package jwtauth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"

	"github.com/golang-jwt/jwt/v5"
)

// key is a verification key pinned to one algorithm.
type key struct {
	id     string
	alg    string
	method jwt.SigningMethod
	pub    any // []byte, *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey
}

// family is the key type an algorithm needs.
type family int

const (
	famHMAC family = iota
	famRSA
	famEC
	famEd
)

var algFamilies = map[string]family{
	"HS256": famHMAC, "HS384": famHMAC, "HS512": famHMAC,
	"RS256": famRSA, "RS384": famRSA, "RS512": famRSA,
	"PS256": famRSA, "PS384": famRSA, "PS512": famRSA,
	"ES256": famEC, "ES384": famEC, "ES512": famEC,
	"EdDSA": famEd,
}

var ecCurves = map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}

// newKey checks that pub suits alg and pins them together.
func newKey(id, alg string, pub any) (*key, error) {
	fam, ok := algFamilies[alg]
	if !ok {
		return nil, fmt.Errorf("algorithm %q is not supported (none is never accepted)", alg)
	}
	switch k := pub.(type) {
	case []byte:
		if fam != famHMAC {
			return nil, fmt.Errorf("a secret cannot be used with %s", alg)
		}
		if len(k) < MinSecretLen {
			return nil, fmt.Errorf("HMAC secret is %d bytes; at least %d are required", len(k), MinSecretLen)
		}
	case *rsa.PublicKey:
		if fam != famRSA {
			return nil, fmt.Errorf("an RSA key cannot be used with %s", alg)
		}
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key is %d bits; at least 2048 are required", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if fam != famEC || ecCurves[alg] != k.Curve {
			return nil, fmt.Errorf("an ECDSA key on %s cannot be used with %s", k.Curve.Params().Name, alg)
		}
	case ed25519.PublicKey:
		if fam != famEd {
			return nil, fmt.Errorf("an Ed25519 key cannot be used with %s", alg)
		}
	default:
		return nil, fmt.Errorf("unsupported key type %T", pub)
	}
	return &key{id: id, alg: alg, method: jwt.GetSigningMethod(alg), pub: pub}, nil
}

// keyFromConfig loads one configured key.
func keyFromConfig(kc KeyConfig, readFile func(string) ([]byte, error)) (*key, error) {
	set := 0
	for _, s := range []string{kc.PEM, kc.PEMFile, kc.Secret, kc.SecretFile} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return nil, errors.New("set exactly one of pem, pem_file, secret, secret_file")
	}
	switch {
	case kc.Secret != "":
		return newKey(kc.ID, kc.Algorithm, []byte(kc.Secret))
	case kc.SecretFile != "":
		b, err := readFile(kc.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("secret_file: %w", err)
		}
		return newKey(kc.ID, kc.Algorithm, bytes.TrimRight(b, "\r\n"))
	}
	data := []byte(kc.PEM)
	if kc.PEMFile != "" {
		b, err := readFile(kc.PEMFile)
		if err != nil {
			return nil, fmt.Errorf("pem_file: %w", err)
		}
		data = b
	}
	pub, err := parsePEM(data)
	if err != nil {
		return nil, err
	}
	return newKey(kc.ID, kc.Algorithm, pub)
}

func parsePEM(data []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	switch block.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		return cert.PublicKey, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a public key (private keys do not belong here)", block.Type)
}

// jwk is the subset of RFC 7517/7518/8037 members we read.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

// parseJWKS loads a key set; every key must be usable or the set is refused,
// so a typo does not silently drop a signing key.
func parseJWKS(data []byte) ([]*key, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("parse JWKS: %w", err)
	}
	var out []*key
	for i, j := range set.Keys {
		if j.Use == "enc" {
			continue
		}
		k, err := j.toKey()
		if err != nil {
			return nil, fmt.Errorf("JWKS key %d (kid %q): %w", i, j.Kid, err)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("JWKS holds no signature keys")
	}
	return out, nil
}

func b64(s, name string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("member %q is not base64url", name)
	}
	return b, nil
}

func (j jwk) toKey() (*key, error) {
	alg := j.Alg
	switch j.Kty {
	case "RSA":
		n, err := b64(j.N, "n")
		if err != nil {
			return nil, err
		}
		e, err := b64(j.E, "e")
		if err != nil {
			return nil, err
		}
		if len(e) > 4 {
			return nil, errors.New("RSA exponent too large")
		}
		if alg == "" {
			alg = "RS256"
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		return newKey(j.Kid, alg, pub)
	case "EC":
		curves := map[string]struct {
			c   elliptic.Curve
			alg string
		}{"P-256": {elliptic.P256(), "ES256"}, "P-384": {elliptic.P384(), "ES384"}, "P-521": {elliptic.P521(), "ES512"}}
		cv, ok := curves[j.Crv]
		if !ok {
			return nil, fmt.Errorf("unsupported curve %q", j.Crv)
		}
		x, err := b64(j.X, "x")
		if err != nil {
			return nil, err
		}
		y, err := b64(j.Y, "y")
		if err != nil {
			return nil, err
		}
		if alg == "" {
			alg = cv.alg
		}
		size := (cv.c.Params().BitSize + 7) / 8
		if len(x) != size || len(y) != size {
			return nil, errors.New("EC coordinates have the wrong length")
		}
		// Go's ecdsa.ParseUncompressedPublicKey checks the point is on the curve.
		raw := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(cv.c, raw)
		if err != nil {
			return nil, fmt.Errorf("EC point: %w", err)
		}
		return newKey(j.Kid, alg, pub)
	case "OKP":
		if j.Crv != "Ed25519" {
			return nil, fmt.Errorf("unsupported OKP curve %q", j.Crv)
		}
		x, err := b64(j.X, "x")
		if err != nil {
			return nil, err
		}
		if len(x) != ed25519.PublicKeySize {
			return nil, errors.New("Ed25519 key has the wrong length")
		}
		if alg == "" {
			alg = "EdDSA"
		}
		return newKey(j.Kid, alg, ed25519.PublicKey(x))
	case "oct":
		if alg == "" {
			return nil, errors.New(`an "oct" key must name its alg`)
		}
		k, err := b64(j.K, "k")
		if err != nil {
			return nil, err
		}
		return newKey(j.Kid, alg, k)
	}
	return nil, fmt.Errorf("unsupported kty %q", j.Kty)
}
