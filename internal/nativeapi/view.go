package nativeapi

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"path"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/imagebound"
	"github.com/comfygate/comfygate/internal/ingest"
	"github.com/comfygate/comfygate/internal/membudget"
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

// Bounds of mask compositing. ComfyUI's mask editor sends a mask of the
// original's size; both are decoded, so a few hundred kilobytes of PNG
// could otherwise make the gateway allocate gigabytes (a 30000×30000 gray
// PNG of zeros is 875 KB).
const (
	// MaxCompositeBytes bounds what one mask upload decodes and allocates:
	// the NRGBA result (4 bytes a pixel) and the larger of the two
	// decodes, which run one after the other. 256 MiB is an 8-bit
	// original of about 5600×5600.
	MaxCompositeBytes = 256 << 20
	// compositeMemory bounds every mask upload of the process at once;
	// the others wait their turn.
	compositeMemory = 2 * MaxCompositeBytes
)

var compositeBudget = membudget.New(compositeMemory)

// Composite writes, as PNG, the original image with the mask's alpha
// channel (both the same size), as ComfyUI's /upload/mask stores it. Both
// headers are read first: sizes that differ, or a composite over
// MaxCompositeBytes, are refused before any pixel is decoded, and the
// memory it takes is held from the process's budget for mask uploads.
func Composite(ctx context.Context, w io.Writer, original, mask io.ReadSeeker) error {
	oi, err := imagebound.Inspect(original)
	if err != nil {
		return apierr.Validation("original_ref is not an image comfygate can read (PNG or JPEG)")
	}
	mi, err := imagebound.Inspect(mask)
	if err != nil {
		return apierr.InvalidRequest("the mask is not an image comfygate can read (PNG or JPEG)")
	}
	if oi.Width != mi.Width || oi.Height != mi.Height {
		return apierr.Validation("the mask and original_ref differ in size")
	}
	result := 4 * int64(oi.Width) * int64(oi.Height)
	need := result + max(oi.DecodeBytes, mi.DecodeBytes)
	if need > MaxCompositeBytes {
		return apierr.Validation(fmt.Sprintf("original_ref is %d×%d pixels: compositing a mask onto it takes %s, over the %s a mask upload may use",
			oi.Width, oi.Height, humanize.IBytes(uint64(need)), humanize.IBytes(MaxCompositeBytes)))
	}
	if err := compositeBudget.Acquire(ctx, need); err != nil {
		return err
	}
	defer func() {
		compositeBudget.Release(need)
		compositeBudget.Dropped(need)
	}()
	limits := imagebound.Limits{MaxBytes: max(oi.DecodeBytes, mi.DecodeBytes)}
	orig, _, err := decodeFromStart(original, limits)
	if err != nil {
		return apierr.Validation("original_ref is not an image comfygate can read (PNG or JPEG)")
	}
	b := orig.Bounds()
	out := image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(out, out.Bounds(), orig, b.Min, draw.Src)
	orig = nil // decoded one after the other: the original may go first
	m, _, err := decodeFromStart(mask, limits)
	if err != nil {
		return apierr.InvalidRequest("the mask is not an image comfygate can read (PNG or JPEG)")
	}
	mo := m.Bounds().Min
	alpha := func(x, y int) uint8 { return color.NRGBAModel.Convert(m.At(x, y)).(color.NRGBA).A }
	if m64, ok := m.(image.RGBA64Image); ok {
		// The same alpha without boxing a color per pixel, which for a
		// large mask is as much garbage as the image.
		alpha = func(x, y int) uint8 { return uint8(m64.RGBA64At(x, y).A >> 8) }
	}
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			out.Pix[out.PixOffset(x, y)+3] = alpha(mo.X+x, mo.Y+y)
		}
	}
	return png.Encode(w, out)
}

// decodeFromStart decodes r from its first byte (Composite has read its
// header already).
func decodeFromStart(r io.ReadSeeker, limits imagebound.Limits) (image.Image, imagebound.Info, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, imagebound.Info{}, err
	}
	return imagebound.Decode(r, limits)
}
