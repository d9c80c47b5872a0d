package ingest

import (
	"encoding/json"
	"mime"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage/blob"
)

// Bounds on metadata. They keep a hostile body from making Parse hold more
// than a few hundred KiB of metadata, whatever the body limit is.
const (
	// MaxFieldBytes bounds each metadata part's value.
	MaxFieldBytes = 8 << 10
	// MaxFilePathBytes bounds file_path.
	MaxFilePathBytes = 1024
	// MaxTags bounds the number of tags across all tags parts.
	MaxTags = 64
	// MaxTagBytes bounds one tag.
	MaxTagBytes = 128
	// MinExpiresIn and MaxExpiresIn are the contract's expires_in bounds (seconds).
	MinExpiresIn = 60
	MaxExpiresIn = 604800
)

// parseContentType accepts any value mime.ParseMediaType accepts and returns
// it normalised (lowercase type, canonical parameters).
func parseContentType(v string) (string, error) {
	mt, params, err := mime.ParseMediaType(strings.TrimSpace(v))
	if err != nil {
		return "", apierr.Validation("content_type is not a valid media type").WithCause(err)
	}
	if f := mime.FormatMediaType(mt, params); f != "" {
		return f, nil
	}
	return mt, nil
}

// CleanFilePath validates a placement path in global-namespace-root form and
// returns it cleaned ("a//b" and "./a/b" become "a/b"). It refuses anything
// that could escape a root once a worker joins it to a directory: absolute
// paths (POSIX, UNC, drive letters) and ".." segments, where a backslash
// counts as a separator because a Windows worker would treat it as one, and
// so does a segment of dots and spaces holding "..", since Windows drops a
// segment's trailing dots and spaces ("... " and ".. " are its parent).
// The absolute-path checks apply to the cleaned path as well, because
// cleaning drops a leading "./" that hid a drive letter or a UNC prefix.
func CleanFilePath(v string) (string, error) {
	bad := func(why string) (string, error) {
		return "", apierr.Validation("file_path " + why)
	}
	switch {
	case v == "":
		return bad("must not be empty")
	case len(v) > MaxFilePathBytes:
		return bad("must be at most " + strconv.Itoa(MaxFilePathBytes) + " bytes")
	case !utf8.ValidString(v):
		return bad("must be valid UTF-8")
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return bad("must not contain control characters")
	case strings.HasSuffix(v, "/") || strings.HasSuffix(v, "\\"):
		return bad("must name a file, not a directory")
	}
	for _, seg := range strings.FieldsFunc(v, func(r rune) bool { return r == '/' || r == '\\' }) {
		if strings.Contains(seg, "..") && strings.TrimRight(seg, ". ") == "" {
			return bad("must not contain '..' segments")
		}
	}
	cleaned := path.Clean(v)
	for _, p := range []string{v, cleaned} {
		switch {
		case p[0] == '/' || p[0] == '\\':
			return bad("must be relative")
		case len(p) >= 2 && p[1] == ':' && isASCIILetter(p[0]):
			return bad("must be relative (no drive letter)")
		}
	}
	if cleaned == "." {
		return bad("must name a file")
	}
	if strings.HasSuffix(cleaned, "\\") {
		// Cleaning can leave one: "a\\/." is "a\\", which Windows reads as
		// the directory a (found by FuzzCleanFilePath).
		return bad("must name a file, not a directory")
	}
	return cleaned, nil
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// parseExpiresIn parses the retention override in seconds.
func parseExpiresIn(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < MinExpiresIn || n > MaxExpiresIn {
		return 0, apierr.Validation("expires_in must be an integer from " +
			strconv.Itoa(MinExpiresIn) + " to " + strconv.Itoa(MaxExpiresIn))
	}
	return n, nil
}

// parseExpectedHash validates the client's claimed digest. It is only ever
// compared with the computed one, never used as an address.
func parseExpectedHash(v string) (string, error) {
	h, err := blob.ParseHash(strings.TrimSpace(v))
	if err != nil {
		return "", apierr.Validation("expected_hash must be blake3: followed by 64 hex digits")
	}
	return h, nil
}

// parseTags reads one tags part: a single tag, or a JSON array of tags (what
// form builders that cannot repeat a field send).
func parseTags(v string) ([]string, error) {
	trimmed := strings.TrimSpace(v)
	if !strings.HasPrefix(trimmed, "[") {
		if err := checkTag(v); err != nil {
			return nil, err
		}
		return []string{v}, nil
	}
	var tags []string
	if err := json.Unmarshal([]byte(trimmed), &tags); err != nil {
		return nil, apierr.Validation("tags must be a string or a JSON array of strings").WithCause(err)
	}
	for _, t := range tags {
		if err := checkTag(t); err != nil {
			return nil, err
		}
	}
	return tags, nil
}

func checkTag(t string) error {
	switch {
	case strings.TrimSpace(t) == "":
		return apierr.Validation("tags must not be empty")
	case len(t) > MaxTagBytes:
		return apierr.Validation("each tag must be at most " + strconv.Itoa(MaxTagBytes) + " bytes")
	case !utf8.ValidString(t):
		return apierr.Validation("tags must be valid UTF-8")
	case strings.IndexFunc(t, unicode.IsControl) >= 0:
		return apierr.Validation("tags must not contain control characters")
	}
	return nil
}
