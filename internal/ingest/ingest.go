// Package ingest parses the multipart body of POST /api/v2/assets into a
// blob upload, streaming the file part straight into the blob store
// wherever it comes among the parts.
//
// It does not use http.Request.ParseMultipartForm or mime/multipart's form
// spooling: those buffer parts in memory or temp files and read the socket
// 4 KiB at a time. Instead the body goes through a 1 MiB bufio.Reader under
// multipart.NewReader, and the file part is pulled into the blob Upload's
// 1 MiB buffer, which is what lets a single upload run at disk speed
// (research/perf.md §4).
package ingest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage/blob"
)

// readBufferSize is the bufio.Reader size under multipart.NewReader; socket
// reads happen at this granularity.
const readBufferSize = 1 << 20

// Limits bounds one upload.
type Limits struct {
	// MaxBytes is the most body bytes (multipart framing included) Parse
	// reads before answering 413; zero or negative means no count here (the
	// caller may still enforce one with http.MaxBytesReader).
	MaxBytes int64
}

// Request is a parsed upload: validated metadata and the finished, not yet
// published, blob upload.
type Request struct {
	ContentType  string
	FilePath     string
	ExpectedHash string // canonical "blake3:<hex>", or "" when not sent
	Tags         []string
	ExpiresIn    int // seconds; 0 when not sent
	// Upload holds the bytes. The caller owns it and must Publish or Abort it.
	Upload blob.Upload
	// Hash and Size describe the received bytes, computed server-side.
	Hash string
	Size int64
}

// Part names the contract defines.
const (
	partFile         = "file"
	partContentType  = "content_type"
	partFilePath     = "file_path"
	partExpectedHash = "expected_hash"
	partTags         = "tags"
	partExpiresIn    = "expires_in"
)

// Parse reads a multipart/form-data upload body. The contract sets no order
// on the parts and clients send either, so Parse takes them as they come:
// each metadata part is validated when it arrives (metadata sent before the
// file is refused before any byte is stored), the file part streams into a
// blob upload whether or not the metadata has been seen, and the parts the
// contract requires are checked once the body has ended. A refusal found
// after the file (a bad or missing metadata part, an expected_hash the bytes
// do not have) aborts the upload. Errors are *apierr.Error, except a failure
// to read the body (client gone, context canceled), which is returned
// wrapped for the caller to map. On any error no temp file remains. On
// success the caller owns Request.Upload.
func Parse(ctx context.Context, body io.Reader, contentTypeHeader string, blobs blob.Store, lim Limits) (req *Request, err error) {
	boundary, err := multipartBoundary(contentTypeHeader)
	if err != nil {
		return nil, err
	}
	br := &bodyReader{ctx: ctx, r: body, limit: lim.MaxBytes}
	mr := multipart.NewReader(bufio.NewReaderSize(br, readBufferSize), boundary)

	// parsed is separate from the named result, which every error return
	// sets to nil before the deferred Abort runs.
	parsed := &Request{}
	defer func() {
		if err != nil && parsed.Upload != nil {
			_ = parsed.Upload.Abort()
			parsed.Upload = nil
		}
	}()
	seen := map[string]bool{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, br.classify(err, lim.MaxBytes)
		}
		name := part.FormName()
		if err := checkPartName(name, seen); err != nil {
			return nil, err
		}
		seen[name] = true
		if name == partFile {
			if err := receiveFile(ctx, parsed, part, br, blobs, lim.MaxBytes); err != nil {
				return nil, err
			}
			continue
		}
		value, err := readField(part, name, br, lim.MaxBytes)
		if err != nil {
			return nil, err
		}
		if err := applyField(parsed, name, value); err != nil {
			return nil, err
		}
	}
	if err := checkRequired(seen); err != nil {
		return nil, err
	}
	parsed.Hash, parsed.Size, err = parsed.Upload.Finish()
	if err != nil {
		return nil, apierr.Upstream(err)
	}
	if parsed.ExpectedHash != "" && parsed.ExpectedHash != parsed.Hash {
		return nil, apierr.HashMismatch(parsed.ExpectedHash, parsed.Hash)
	}
	return parsed, nil
}

// multipartBoundary checks the request's Content-Type header.
func multipartBoundary(header string) (string, error) {
	mt, params, err := mime.ParseMediaType(header)
	if err != nil || mt != "multipart/form-data" {
		return "", apierr.InvalidRequest("Content-Type must be multipart/form-data")
	}
	boundary := params["boundary"]
	if boundary == "" {
		return "", apierr.InvalidRequest("Content-Type multipart/form-data needs a boundary")
	}
	return boundary, nil
}

// checkRequired names the first required part the body did not have.
func checkRequired(seen map[string]bool) error {
	for _, name := range []string{partContentType, partFilePath} {
		if !seen[name] {
			return apierr.Validation(name + " is required")
		}
	}
	if !seen[partFile] {
		return apierr.Validation("the file part is required")
	}
	return nil
}

// checkPartName refuses unknown parts and repeats of single-valued ones.
func checkPartName(name string, seen map[string]bool) error {
	switch name {
	case partTags:
		return nil
	case partFile, partContentType, partFilePath, partExpectedHash, partExpiresIn:
		if seen[name] {
			return apierr.Validation(fmt.Sprintf("part %q may be sent only once", name))
		}
		return nil
	case "":
		return apierr.Validation("every part needs a form-data name")
	}
	return apierr.Validation(fmt.Sprintf("unknown part %q", truncate(name, 64)))
}

// receiveFile streams the file part into a new blob upload.
func receiveFile(ctx context.Context, req *Request, part *multipart.Part, br *bodyReader, blobs blob.Store, limit int64) error {
	// An expected_hash sent before the file lets the store stream the
	// bytes toward their address at once (the SDKs send it there); one
	// sent after it is only compared with the computed hash, in Parse.
	up, err := blobs.NewUpload(ctx, req.ExpectedHash)
	if err != nil {
		return apierr.Upstream(err)
	}
	req.Upload = up // from here on, Parse's deferred Abort covers it
	pr := &partReader{r: part}
	if _, err := up.ReadFrom(pr); err != nil {
		if pr.err != nil {
			return br.classify(pr.err, limit)
		}
		return apierr.Upstream(err)
	}
	return nil
}

// readField reads a metadata part's value, refusing values over
// MaxFieldBytes without reading past the bound.
func readField(part *multipart.Part, name string, br *bodyReader, limit int64) (string, error) {
	b, err := io.ReadAll(io.LimitReader(part, MaxFieldBytes+1))
	if err != nil {
		return "", br.classify(err, limit)
	}
	if len(b) > MaxFieldBytes {
		return "", apierr.Validation(fmt.Sprintf("part %q exceeds %d bytes", name, MaxFieldBytes))
	}
	return string(b), nil
}

// applyField validates one metadata value into req.
func applyField(req *Request, name, value string) error {
	var err error
	switch name {
	case partContentType:
		req.ContentType, err = parseContentType(value)
	case partFilePath:
		req.FilePath, err = CleanFilePath(value)
	case partExpectedHash:
		req.ExpectedHash, err = parseExpectedHash(value)
	case partExpiresIn:
		req.ExpiresIn, err = parseExpiresIn(value)
	case partTags:
		var tags []string
		if tags, err = parseTags(value); err == nil {
			if len(req.Tags)+len(tags) > MaxTags {
				return apierr.Validation(fmt.Sprintf("at most %d tags are allowed", MaxTags))
			}
			req.Tags = append(req.Tags, tags...)
		}
	default:
		// Unreachable: checkPartName admits only the names above.
		err = apierr.Upstream(errors.New("ingest: unhandled part " + name))
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
