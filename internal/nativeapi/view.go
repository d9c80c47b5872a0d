package nativeapi

import (
	"context"
	"errors"
	"image"
	"image/color"
	"image/draw"
	_ "image/jpeg" // originals may be JPEG
	"image/png"
	"io"
	"path"
	"strings"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/ingest"
	"github.com/comfygate/comfygate/storage"
)

// ViewRef is a file as /view and original_ref name it, resolved to the
// asset file path it stands for.
type ViewRef struct {
	// FilePath is "<subfolder>/<filename>": an uploaded asset's file_path,
	// or an output's (which starts with its job id).
	FilePath string
	Type     string
}

// ParseViewRef reads /view's filename, subfolder and type. A filename may
// carry ComfyUI's annotation (" [output]", " [input]", " [temp]"), which
// sets the type. The type does not change the lookup: uploads and outputs
// are all assets of the caller, each under its own path.
func ParseViewRef(filename, subfolder, typ string) (ViewRef, error) {
	for _, t := range []string{"output", "input", "temp"} {
		if base, ok := strings.CutSuffix(filename, " ["+t+"]"); ok {
			filename, typ = base, t
			break
		}
	}
	if typ == "" {
		typ = "output"
	}
	if filename == "" || strings.HasPrefix(filename, "/") || strings.Contains(filename, "..") {
		return ViewRef{}, apierr.InvalidRequest("filename must name a file without '..' or a leading '/'")
	}
	p, err := ingest.CleanFilePath(path.Join(subfolder, filename))
	if err != nil || strings.HasPrefix(subfolder, "/") {
		return ViewRef{}, apierr.Forbidden()
	}
	return ViewRef{FilePath: p, Type: typ}, nil
}

// Open is GET /view: the caller's asset at ref (the newest of that path)
// and its bytes. The caller closes the file.
func (s *Service) Open(ctx context.Context, account string, ref ViewRef) (storage.Asset, io.ReadSeekCloser, error) {
	return s.openRef(ctx, account, ref)
}

func (s *Service) openRef(ctx context.Context, account string, ref ViewRef) (storage.Asset, io.ReadSeekCloser, error) {
	a, err := s.Assets.Store.FindAssetByPath(ctx, account, ref.FilePath)
	if errors.Is(err, storage.ErrNotFound) {
		return a, nil, apierr.NotFound("no such file")
	}
	if err != nil {
		return a, nil, apierr.Upstream(err)
	}
	return s.Assets.Open(ctx, account, a.ID)
}

// Composite writes, as PNG, the original image with the mask's alpha
// channel (both the same size), as ComfyUI's /upload/mask stores it.
func Composite(w io.Writer, original, mask io.Reader) error {
	orig, _, err := image.Decode(original)
	if err != nil {
		return apierr.Validation("original_ref is not an image comfygate can read (PNG or JPEG)")
	}
	m, _, err := image.Decode(mask)
	if err != nil {
		return apierr.InvalidRequest("the mask is not an image comfygate can read (PNG or JPEG)")
	}
	b := orig.Bounds()
	if m.Bounds().Dx() != b.Dx() || m.Bounds().Dy() != b.Dy() {
		return apierr.Validation("the mask and original_ref differ in size")
	}
	out := image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(out, out.Bounds(), orig, b.Min, draw.Src)
	mo := m.Bounds().Min
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			a := color.NRGBAModel.Convert(m.At(mo.X+x, mo.Y+y)).(color.NRGBA).A
			out.Pix[out.PixOffset(x, y)+3] = a
		}
	}
	return png.Encode(w, out)
}
