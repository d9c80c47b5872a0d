package nativeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"mime/multipart"
	"runtime"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/apierr/apierrtest"
	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/builtin"
	"github.com/comfygate/comfygate/internal/imagebound"
	"github.com/comfygate/comfygate/internal/ingest"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/tests/bombs"
)

// FuzzPrompt runs a POST /prompt body through what the front does before
// a job exists: decode it, then the v2 parse and validation the jobs
// service applies, and Reject for whatever that refuses. Every refusal is
// ComfyUI's 4xx shape; an accepted body has a canonical UUID for its id.
func FuzzPrompt(f *testing.F) {
	for _, s := range []string{
		`{"prompt":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}},"2":{"class_type":"PreviewImage","inputs":{"images":["1",0]}}},"client_id":"c"}`,
		`{"prompt":{"1":{"class_type":"PreviewImage","inputs":{"images":["9",0]}}},"prompt_id":"0b9f7c1e-8c1e-4c1e-9c1e-0c1e8c1e8c1e"}`,
		`{"prompt":{"1":{"class_type":"Nope","inputs":{}}},"prompt_id":"0B9F7C1E-8C1E-4C1E-9C1E-0C1E8C1E8C1E"}`,
		`{"prompt":null}`, `{}`, `{"prompt":{},"partial_execution_targets":["1"]}`, `[]`, ` `, `{"prompt":1}`,
		`{"prompt":{"1":{}}, "extra_data":{"api_key_comfy_org":{"x":1}}}`, `{"prompt":{"1":{"class_type":"PreviewImage","inputs":{"images":["1",0]}}}}`,
	} {
		f.Add([]byte(s))
	}
	cat, err := workflow.ParseObjectInfo(builtin.ObjectInfo())
	if err != nil {
		f.Fatal(err)
	}
	lim := workflow.Limits{MaxBodyBytes: 64 << 10, MaxNodes: 40, MaxDepth: 12, MaxStringBytes: 512, MaxArrayLen: 64}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, id, v2Body, rej := decodePrompt(body)
		if rej != nil {
			checkRejection(t, body, rej)
			return
		}
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			t.Fatalf("prompt id %q is not a canonical UUID", id)
		}
		sub, err := workflow.ParseSubmit(v2Body, lim)
		if err == nil {
			err = workflow.Validate(sub.Workflow, cat)
		}
		if err == nil {
			return
		}
		g, _ := workflow.DecodeGraph(in.Prompt)
		r, ok := Reject(err, g, cat)
		if !ok {
			t.Fatalf("body %q: %v is not answered in ComfyUI's shape", body, err)
		}
		checkRejection(t, body, r)
	})
}

func checkRejection(t *testing.T, body []byte, r *Rejection) {
	t.Helper()
	if r.Status < 400 || r.Status > 499 || r.Body.Error.Type == "" {
		t.Fatalf("body %q: rejection %d %q", body, r.Status, r.Body.Error.Type)
	}
	if _, err := json.Marshal(r.Body); err != nil {
		t.Fatalf("body %q: the rejection does not encode: %v", body, err)
	}
}

// FuzzUploadForm feeds /upload/image and /upload/mask bodies to the form
// parser. A refusal is a 4xx in the envelope; an accepted form names a
// file (no path in its name) below the upload folder, of a known type.
func FuzzUploadForm(f *testing.F) {
	seed := func(mask bool, parts ...[3]string) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		_ = w.SetBoundary("fuzzboundary")
		for _, p := range parts {
			var pw interface{ Write([]byte) (int, error) }
			if p[1] != "" {
				pw, _ = w.CreateFormFile(p[0], p[1])
			} else {
				pw, _ = w.CreateFormField(p[0])
			}
			_, _ = pw.Write([]byte(p[2]))
		}
		_ = w.Close()
		f.Add(buf.Bytes(), mask)
	}
	seed(false, [3]string{"image", "a.png", "png"}, [3]string{"subfolder", "x/y"}, [3]string{"type", "input"})
	seed(false, [3]string{"overwrite", "true"}, [3]string{"image", "..", "x"})
	seed(false, [3]string{"image", "a.png", "x"}, [3]string{"subfolder", "../.."})
	seed(false, [3]string{"image", "a.png", "x"}, [3]string{"subfolder", "./C:"})
	seed(true, [3]string{"original_ref", `{"filename":"o.png","subfolder":"","type":"input"}`}, [3]string{"image", "m.png", "png"})
	seed(true, [3]string{"original_ref", `{}`}, [3]string{"image", "m.png", "png"})
	seed(false, [3]string{"image", "a.png", "x"}, [3]string{"image", "b.png", "y"})

	blobs := blob.NewFileSystem(f.TempDir())
	if err := blobs.Init(); err != nil {
		f.Fatal(err)
	}
	s := &Service{Assets: &assets.Service{Blobs: blobs}}
	f.Fuzz(func(t *testing.T, body []byte, mask bool) {
		form, err := s.parseUpload(context.Background(), bytes.NewReader(body), "multipart/form-data; boundary=fuzzboundary", mask)
		if form != nil && form.upload != nil {
			defer func() { _ = form.upload.Abort() }()
		}
		if err != nil {
			apierrtest.ClientError(t, body, err)
			return
		}
		if strings.ContainsAny(form.filename, `/\`) || form.filename == "" {
			t.Fatalf("accepted file name %q", form.filename)
		}
		if form.typ != "input" && form.typ != "temp" && form.typ != "output" {
			t.Fatalf("accepted type %q", form.typ)
		}
		joined := strings.TrimPrefix(form.subfolder+"/"+form.filename, "/")
		if got, err := ingest.CleanFilePath(joined); err != nil || got != joined {
			t.Fatalf("accepted %q, which is not a clean path below the folder (%q, %v)", joined, got, err)
		}
		if mask && form.originalRef == nil && form.maskBytes == nil {
			t.Fatalf("a mask form was accepted without its image")
		}
	})
}

// FuzzParseViewRef: what /view and original_ref accept is a clean file
// path below the caller's files.
func FuzzParseViewRef(f *testing.F) {
	for _, s := range [][3]string{{"a.png", "", "output"}, {"a.png [input]", "x", ""}, {"..", "", ""}, {"a", "/etc", ""},
		{"a", "./C:", ""}, {"b", `..\..`, "temp"}, {"a", "x/../..", ""}, {"a [temp] [output]", "", ""}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, filename, subfolder, typ string) {
		ref, err := ParseViewRef(filename, subfolder, typ)
		if err != nil {
			apierrtest.ClientError(t, filename+"|"+subfolder, err)
			return
		}
		if got, err := ingest.CleanFilePath(ref.FilePath); err != nil || got != ref.FilePath {
			t.Fatalf("ParseViewRef(%q, %q) = %q, which is not a clean path (%q, %v)", filename, subfolder, ref.FilePath, got, err)
		}
		if ref.Type == "" {
			t.Fatalf("ParseViewRef(%q, %q, %q) has no type", filename, subfolder, typ)
		}
	})
}

// FuzzComposite decodes hostile originals and masks. A refusal is a 4xx;
// an accepted pair gives a PNG of the original's size; and what the
// decode allocates stays within the bound Composite checked before it.
func FuzzComposite(f *testing.F) {
	small := func(w, h int, a uint8) []byte {
		im := image.NewNRGBA(image.Rect(0, 0, w, h))
		for i := range im.Pix {
			im.Pix[i] = a
		}
		var buf bytes.Buffer
		_ = png.Encode(&buf, im)
		return buf.Bytes()
	}
	gray := image.NewGray16(image.Rect(0, 0, 4, 4))
	gray.SetGray16(1, 1, color.Gray16{Y: 0xffff})
	var g16 bytes.Buffer
	_ = png.Encode(&g16, gray)
	f.Add(small(3, 2, 200), small(3, 2, 7))
	f.Add(small(3, 2, 200), small(2, 3, 7))
	f.Add(g16.Bytes(), small(4, 4, 1))
	f.Add(bombs.PNG(30000, 30000, 0, 8, false), small(1, 1, 0))
	f.Add(bombs.PNG(64, 64, 6, 16, true), bombs.PNG(64, 64, 0, 1, true))
	f.Add(bombs.JPEG(16, 16, 3, true), bombs.JPEG(16, 16, 1, false))
	f.Add(bombs.GIF(4, 4, 2), small(4, 4, 1))
	f.Add([]byte("\x89PNG\r\n\x1a\n"), []byte{0xff, 0xd8})
	f.Fuzz(func(t *testing.T, original, mask []byte) {
		var out bytes.Buffer
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err = Composite(context.Background(), &out, bytes.NewReader(original), bytes.NewReader(mask))
		runtime.ReadMemStats(&after)
		if err != nil {
			apierrtest.ClientError(t, len(original), err)
			return
		}
		oi, ierr := imagebound.Inspect(bytes.NewReader(original))
		if ierr != nil {
			t.Fatalf("Composite accepted an original Inspect refuses: %v", ierr)
		}
		bound := 4*int64(oi.Width)*int64(oi.Height) + 2*oi.DecodeBytes + 2*int64(out.Len()) + slack
		if got := int64(after.TotalAlloc - before.TotalAlloc); got > bound {
			t.Fatalf("compositing a %d×%d original allocated %d bytes; the bound is %d", oi.Width, oi.Height, got, bound)
		}
		im, perr := png.Decode(&out)
		if perr != nil {
			t.Fatalf("Composite wrote a PNG that does not decode: %v", perr)
		}
		if b := im.Bounds(); b.Dx() != oi.Width || b.Dy() != oi.Height {
			t.Fatalf("composite is %v; the original is %d×%d", b, oi.Width, oi.Height)
		}
	})
}

// slack covers the decoders' and the encoder's fixed buffers (zlib
// windows, Huffman tables, the bufio readers).
const slack = 2 << 20
