package blob

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// HashPrefix names the only hash algorithm the store addresses content by.
const HashPrefix = "blake3:"

// hexLen is the length of a hex-encoded 256-bit blake3 digest.
const hexLen = 64

// ErrInvalidHash is returned for any hash string that is not
// "blake3:" followed by 64 hex digits. Paths are never built from such a string.
var ErrInvalidHash = errors.New("blob: invalid hash")

// ParseHash validates a client-supplied "blake3:<hex>" string and returns its
// canonical form (lowercase hex). Uppercase hex is accepted because clients
// print digests either way; everything else (other prefixes, lengths,
// whitespace, non-hex) is rejected.
func ParseHash(s string) (string, error) {
	if !strings.HasPrefix(s, HashPrefix) || len(s) != len(HashPrefix)+hexLen {
		return "", fmt.Errorf("%w: want %s followed by %d hex digits", ErrInvalidHash, HashPrefix, hexLen)
	}
	hex := s[len(HashPrefix):]
	out := make([]byte, 0, len(s))
	out = append(out, HashPrefix...)
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", fmt.Errorf("%w: non-hex digit", ErrInvalidHash)
		}
		out = append(out, c)
	}
	return string(out), nil
}

// canonicalHex returns the hex part of a canonical hash, or ErrInvalidHash.
// Store methods accept only the canonical (lowercase) form, so that a path is
// derived from exactly one spelling of each digest.
func canonicalHex(hash string) (string, error) {
	if !strings.HasPrefix(hash, HashPrefix) || len(hash) != len(HashPrefix)+hexLen {
		return "", ErrInvalidHash
	}
	hex := hash[len(HashPrefix):]
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", ErrInvalidHash
		}
	}
	return hex, nil
}

// shardDirs returns the two shard directories (objects/ab, objects/ab/cd) and
// the object path for hex, so that no directory grows past 256 entries at the
// top two levels.
func shardDirs(objects, hex string) (first, second, object string) {
	first = filepath.Join(objects, hex[0:2])
	second = filepath.Join(first, hex[2:4])
	return first, second, filepath.Join(second, hex)
}
