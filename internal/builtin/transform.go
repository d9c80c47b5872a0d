package builtin

// Nodes whose arithmetic is exact: creation, inversion and pure pixel
// rearrangements. Their results equal ComfyUI's bit for bit.

func runEmptyImage(c *nodeCall) ([]any, error) {
	v, err := c.intValues("width", "height", "batch_size", "color")
	if err != nil {
		return nil, err
	}
	im, err := emptyImage(v[0], v[1], v[2], v[3])
	if err != nil {
		return nil, err
	}
	return []any{im}, nil
}

// emptyImage fills an image with a 0xRRGGBB color. ComfyUI computes each
// channel as a Python float (c & 0xFF) / 0xFF and torch.full stores it as
// float32, so the division happens in float64 and is then rounded.
func emptyImage(w, h, b, color int) (*Image, error) {
	im, err := newImage(b, h, w)
	if err != nil {
		return nil, err
	}
	rgb := [3]float32{
		float32(float64((color>>16)&0xFF) / 0xFF),
		float32(float64((color>>8)&0xFF) / 0xFF),
		float32(float64(color&0xFF) / 0xFF),
	}
	for i := 0; i < len(im.Pix); i += 3 {
		im.Pix[i], im.Pix[i+1], im.Pix[i+2] = rgb[0], rgb[1], rgb[2]
	}
	return im, nil
}

func runImageInvert(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	return []any{invert(im)}, nil
}

// invert is ComfyUI's `1.0 - image` in float32. Note that after SaveImage's
// truncation this is not always 255-v: 65 loads as float32(65/255), and
// 255*(1-x) lands just below 190, which truncates to 189.
func invert(im *Image) *Image {
	out := &Image{B: im.B, H: im.H, W: im.W, C: im.C, Pix: make([]float32, len(im.Pix))}
	for i, v := range im.Pix {
		out.Pix[i] = 1 - v
	}
	return out
}

func runImageCrop(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	v, err := c.intValues(cropWidgets...)
	if err != nil {
		return nil, err
	}
	return []any{crop(im, v[0], v[1], v[2], v[3])}, nil
}

// cropWidgets are ImageCrop's widgets, in crop's order.
var cropWidgets = []string{"width", "height", "x", "y"}

// crop follows ImageCrop: x and y are clamped to the last column/row, and
// the region is clipped at the image edge the way tensor slicing clips it,
// so the result may be smaller than width×height but never empty.
func crop(im *Image, width, height, x, y int) *Image {
	x, y, w, h := cropRect(im.W, im.H, width, height, x, y)
	return subImage(im, x, y, w, h)
}

// cropRect is crop's region of a imW×imH image.
func cropRect(imW, imH, width, height, x, y int) (x0, y0, w, h int) {
	x0, y0 = min(x, imW-1), min(y, imH-1)
	return x0, y0, min(x0+width, imW) - x0, min(y0+height, imH) - y0
}

// subImage copies the w×h region at (x, y) of every frame.
func subImage(im *Image, x, y, w, h int) *Image {
	out := &Image{B: im.B, H: h, W: w, C: im.C, Pix: make([]float32, im.B*h*w*im.C)}
	rowLen := w * im.C
	for b := 0; b < im.B; b++ {
		src, dst := im.frame(b), out.frame(b)
		for r := 0; r < h; r++ {
			s := ((y+r)*im.W + x) * im.C
			copy(dst[r*rowLen:(r+1)*rowLen], src[s:s+rowLen])
		}
	}
	return out
}

func runImageFlip(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	method, err := c.comboValue("flip_method")
	if err != nil {
		return nil, err
	}
	// "x-axis: vertically" is torch.flip(dims=[1]) (rows, upside down);
	// "y-axis: horizontally" is dims=[2] (columns, mirror).
	if method == "x-axis: vertically" {
		return []any{remap(im, im.H, im.W, func(y, x int) (int, int) { return im.H - 1 - y, x })}, nil
	}
	return []any{remap(im, im.H, im.W, func(y, x int) (int, int) { return y, im.W - 1 - x })}, nil
}

func runImageRotate(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	rotation, err := c.comboValue("rotation")
	if err != nil {
		return nil, err
	}
	return []any{rotate(im, rotation)}, nil
}

// rotate is torch.rot90(image, k, dims=[2, 1]) on [B,H,W,C]: k quarter
// turns clockwise.
func rotate(im *Image, rotation string) *Image {
	switch rotation {
	case "90 degrees":
		return remap(im, im.W, im.H, func(y, x int) (int, int) { return im.H - 1 - x, y })
	case "180 degrees":
		return remap(im, im.H, im.W, func(y, x int) (int, int) { return im.H - 1 - y, im.W - 1 - x })
	case "270 degrees":
		return remap(im, im.W, im.H, func(y, x int) (int, int) { return x, im.W - 1 - y })
	}
	return im
}

// remap builds an h×w image whose pixel (y, x) is im's pixel src(y, x).
func remap(im *Image, h, w int, src func(y, x int) (int, int)) *Image {
	out := &Image{B: im.B, H: h, W: w, C: im.C, Pix: make([]float32, im.B*h*w*im.C)}
	for b := 0; b < im.B; b++ {
		in, dst := im.frame(b), out.frame(b)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				sy, sx := src(y, x)
				s, d := (sy*im.W+sx)*im.C, (y*w+x)*im.C
				copy(dst[d:d+im.C], in[s:s+im.C])
			}
		}
	}
	return out
}
