package nativeapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/ingest"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// maxRenames bounds the "name (i).ext" candidates an upload without
// overwrite tries before it gives up.
const maxRenames = 1000

// uploadForm is a parsed /upload/image or /upload/mask body.
type uploadForm struct {
	filename, subfolder, typ string
	overwrite                bool
	originalRef              *FileRef
	contentType              string
	upload                   blob.Upload
	maskBytes                []byte // a mask upload's image, before compositing
	hash                     string
	size                     int64
}

// Upload is POST /upload/image (mask false) and /upload/mask (mask true):
// the file becomes one of the account's assets, its file_path
// "<subfolder>/<name>", deduplicated as v2 uploads are. Without overwrite
// a name the account already uses for other bytes becomes "name (1).ext",
// as ComfyUI renames; the same bytes under the same name are the same
// asset. A mask upload is the original_ref image with the upload's alpha
// channel. The answer names the file as a later prompt's LoadImage and
// /view take it.
func (s *Service) Upload(ctx context.Context, account string, body io.Reader, contentType string, mask bool) (FileRef, error) {
	form, err := s.parseUpload(ctx, body, contentType, mask)
	defer func() {
		if form != nil && form.upload != nil {
			_ = form.upload.Abort() // after Publish: drops what is left of it
		}
	}()
	if err != nil {
		return FileRef{}, err
	}
	if mask {
		if err := s.applyMask(ctx, account, form); err != nil {
			return FileRef{}, err
		}
	}
	return s.saveUpload(ctx, account, form)
}

func (s *Service) parseUpload(ctx context.Context, body io.Reader, contentType string, mask bool) (*uploadForm, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, apierr.InvalidRequest("Content-Type must be multipart/form-data with a boundary")
	}
	mr := multipart.NewReader(bufio.NewReaderSize(body, 1<<20), params["boundary"])
	form := &uploadForm{}
	for {
		if err := ctx.Err(); err != nil {
			return form, err
		}
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return form, readError(err)
		}
		name := part.FormName()
		if name == "image" && part.FileName() != "" {
			if form.filename != "" {
				return form, apierr.InvalidRequest("send one image part")
			}
			if mask { // composited in memory before it is stored
				form.filename = part.FileName()
				if form.maskBytes, err = io.ReadAll(part); err != nil {
					return form, readError(err)
				}
				continue
			}
			if err := s.receive(ctx, form, part); err != nil {
				return form, err
			}
			continue
		}
		value, err := io.ReadAll(io.LimitReader(part, ingest.MaxFieldBytes+1))
		if err != nil {
			return form, readError(err)
		}
		if len(value) > ingest.MaxFieldBytes {
			return form, apierr.InvalidRequest(fmt.Sprintf("part %q is too long", name))
		}
		switch name {
		case "subfolder":
			form.subfolder = string(value)
		case "type":
			form.typ = string(value)
		case "overwrite":
			form.overwrite = string(value) == "true" || string(value) == "1"
		case "original_ref":
			var ref FileRef
			if json.Unmarshal(value, &ref) != nil || ref.Filename == "" {
				return form, apierr.InvalidRequest("original_ref must be a JSON object naming a filename")
			}
			form.originalRef = &ref
		}
	}
	if form.filename == "" {
		return form, apierr.InvalidRequest("the image part (a file) is required")
	}
	switch form.typ {
	case "":
		form.typ = "input"
	case "input", "temp", "output":
	default:
		return form, apierr.InvalidRequest("type must be input, temp or output")
	}
	if strings.ContainsAny(form.filename, `/\`) || form.filename == "." || form.filename == ".." {
		return form, apierr.InvalidRequest("the file name must not contain a path")
	}
	if _, err := ingest.CleanFilePath(path.Join(form.subfolder, form.filename)); err != nil {
		return form, apierr.InvalidRequest("subfolder and file name must name a file below the upload folder")
	}
	form.subfolder = strings.Trim(path.Clean("/"+form.subfolder), "/")
	if mask {
		return form, nil
	}
	form.hash, form.size, err = form.upload.Finish()
	if err != nil {
		return form, apierr.Upstream(err)
	}
	return form, nil
}

// receive streams the file part into a new blob upload.
func (s *Service) receive(ctx context.Context, form *uploadForm, part *multipart.Part) error {
	up, err := s.Assets.Blobs.NewUpload(ctx, "")
	if err != nil {
		return apierr.Upstream(err)
	}
	form.upload, form.filename = up, part.FileName()
	form.contentType = mime.TypeByExtension(path.Ext(form.filename))
	if form.contentType == "" {
		form.contentType = part.Header.Get("Content-Type")
	}
	if form.contentType == "" {
		form.contentType = "application/octet-stream"
	}
	if _, err := up.ReadFrom(&errReader{r: part}); err != nil {
		var re *readErr
		if errors.As(err, &re) {
			return readError(re.err)
		}
		return apierr.Upstream(err)
	}
	return nil
}

// errReader marks errors of the body side, so a failed ReadFrom can be told
// from a failure of the blob store.
type errReader struct{ r io.Reader }

type readErr struct{ err error }

func (e *readErr) Error() string { return e.err.Error() }

func (r *errReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		return n, &readErr{err}
	}
	return n, err
}

// readError maps a body that could not be read: over the limit is 413, one
// that came too slowly 408 (httpx.BodyRate), a malformed one 400, a client
// gone a 400 the log keeps at debug.
func readError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apierr.PayloadTooLarge(mbe.Limit)
	}
	if e, ok := apierr.As(err); ok && e.Status == http.StatusRequestTimeout {
		return e
	}
	return apierr.InvalidRequest("the request body is not complete multipart/form-data").WithCause(err)
}

// saveUpload records the upload as the account's asset, reusing an asset
// of the same name over the same bytes.
func (s *Service) saveUpload(ctx context.Context, account string, form *uploadForm) (FileRef, error) {
	name := form.filename
	for i := 1; ; i++ {
		existing, err := s.Assets.Store.FindAssetByPath(ctx, account, path.Join(form.subfolder, name))
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return FileRef{}, apierr.Upstream(err)
		case existing.Hash == form.hash:
			return FileRef{Filename: name, Subfolder: form.subfolder, Type: form.typ}, nil
		case !form.overwrite:
			if i > maxRenames {
				return FileRef{}, apierr.Validation("too many files of this name; upload with overwrite or another name")
			}
			ext := path.Ext(form.filename)
			name = fmt.Sprintf("%s (%d)%s", strings.TrimSuffix(form.filename, ext), i, ext)
			continue
		}
		break
	}
	var expires *time.Time
	if d := s.Assets.DefaultRetention; d > 0 {
		t := time.Now().Add(d).UTC()
		expires = &t
	}
	_, err := s.Assets.Store.CreateAsset(ctx, storage.NewAsset{
		ID: storage.NewID(), AccountID: account, Hash: form.hash, SizeBytes: form.size,
		ContentType: form.contentType, FilePath: path.Join(form.subfolder, name), ExpiresAt: expires,
	}, form.upload)
	if err != nil {
		return FileRef{}, apierr.Upstream(err)
	}
	return FileRef{Filename: name, Subfolder: form.subfolder, Type: form.typ}, nil
}

// applyMask stores the original_ref image with the uploaded mask's alpha
// channel, as ComfyUI's mask editor expects.
func (s *Service) applyMask(ctx context.Context, account string, form *uploadForm) error {
	if form.originalRef == nil {
		return apierr.InvalidRequest("a mask upload needs original_ref")
	}
	ref, err := ParseViewRef(form.originalRef.Filename, form.originalRef.Subfolder, form.originalRef.Type)
	if err != nil {
		return err
	}
	_, f, err := s.openRef(ctx, account, ref)
	if err != nil {
		return err
	}
	defer f.Close()
	up, err := s.Assets.Blobs.NewUpload(ctx, "")
	if err != nil {
		return apierr.Upstream(err)
	}
	form.upload, form.contentType = up, "image/png" // Upload aborts it on failure
	// The PNG streams into the upload rather than through a buffer as
	// large as the image.
	if err := Composite(ctx, up, f, bytes.NewReader(form.maskBytes)); err != nil {
		if _, ok := apierr.As(err); ok || ctx.Err() != nil {
			return err
		}
		return apierr.Upstream(err)
	}
	if form.hash, form.size, err = up.Finish(); err != nil {
		return apierr.Upstream(err)
	}
	return nil
}
