package builtin

import "fmt"

// Image is ComfyUI's IMAGE tensor: B frames of H rows of W pixels of C
// float32 channels, stored row-major as [b][y][x][c] like torch's
// contiguous [B,H,W,C]. C is always 3 for images this package produces.
type Image struct {
	B, H, W, C int
	Pix        []float32
}

// Mask is ComfyUI's MASK tensor: B frames of H×W float32, 1 meaning masked.
type Mask struct {
	B, H, W int
	Pix     []float32
}

// maxTensorPixels bounds B×H×W of any tensor a node creates. It equals
// Pillow's decompression-bomb error threshold, so the executor refuses what
// ComfyUI's LoadImage would refuse and cannot be made to allocate gigabytes
// by one EmptyImage widget.
const maxTensorPixels = 178956970

// newImage allocates a zeroed RGB image, refusing sizes that are empty or
// exceed maxTensorPixels.
func newImage(b, h, w int) (*Image, error) {
	if err := checkImageSize(b, h, w); err != nil {
		return nil, err
	}
	return &Image{B: b, H: h, W: w, C: 3, Pix: make([]float32, b*h*w*3)}, nil
}

func checkImageSize(b, h, w int) error {
	if b <= 0 || h <= 0 || w <= 0 {
		return fmt.Errorf("image size %dx%d (batch %d) must be positive", w, h, b)
	}
	if int64(b)*int64(h)*int64(w) > maxTensorPixels {
		return fmt.Errorf("image tensor of %d×%d×%d pixels exceeds the limit of %d pixels", b, h, w, maxTensorPixels)
	}
	return nil
}

// frame returns the pixels of frame i.
func (im *Image) frame(i int) []float32 {
	n := im.H * im.W * im.C
	return im.Pix[i*n : (i+1)*n]
}

// sameShape reports whether two images have identical [B,H,W,C].
func (im *Image) sameShape(o *Image) bool {
	return im.B == o.B && im.H == o.H && im.W == o.W && im.C == o.C
}

// toUint8 converts a float32 sample to 8 bits exactly as ComfyUI's SaveImage
// does: `np.clip(255. * x, 0, 255).astype(np.uint8)`, i.e. a float32
// multiply, a clip and a truncation (not rounding). NaN becomes 0.
func toUint8(x float32) uint8 {
	v := float32(255) * x
	if !(v > 0) { // also catches NaN
		return 0
	}
	if v >= 255 {
		return 255
	}
	return uint8(v)
}

// fromUint8 converts an 8-bit sample to float32 as ComfyUI's LoadImage does:
// `np.array(img).astype(np.float32) / 255.0`, a float32 division.
func fromUint8(v uint8) float32 {
	return float32(v) / float32(255)
}
