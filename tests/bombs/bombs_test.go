package bombs

import (
	"bytes"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"
)

// TestBombsAreImages: at a size Go's decoders can take, every kind of bomb
// decodes to the size it claims (so the big ones are real images, not
// malformed files a decoder would refuse anyway), and the big ones are
// small on disk.
func TestBombsAreImages(t *testing.T) {
	const w, h = 37, 23
	type decoded struct {
		name  string
		data  []byte
		check func([]byte) (int, int, error)
	}
	pngSize := func(b []byte) (int, int, error) {
		im, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			return 0, 0, err
		}
		return im.Bounds().Dx(), im.Bounds().Dy(), nil
	}
	jpegSize := func(b []byte) (int, int, error) {
		im, err := jpeg.Decode(bytes.NewReader(b))
		if err != nil {
			return 0, 0, err
		}
		return im.Bounds().Dx(), im.Bounds().Dy(), nil
	}
	var cases []decoded
	for _, c := range []struct {
		ct, depth uint8
	}{{0, 1}, {0, 8}, {0, 16}, {2, 8}, {2, 16}, {3, 4}, {4, 8}, {6, 8}, {6, 16}} {
		for _, interlaced := range []bool{false, true} {
			cases = append(cases, decoded{"png", PNG(w, h, c.ct, c.depth, interlaced), pngSize})
		}
	}
	for _, n := range []int{1, 3} {
		for _, progressive := range []bool{false, true} {
			cases = append(cases, decoded{"jpeg", JPEG(w, h, n, progressive), jpegSize})
		}
	}
	for i, c := range cases {
		if gw, gh, err := c.check(c.data); err != nil || gw != w || gh != h {
			t.Errorf("%s %d: decoded %d×%d, %v; want %d×%d", c.name, i, gw, gh, err, w, h)
		}
	}
	g, err := gif.DecodeAll(bytes.NewReader(GIF(50, 40, 7)))
	if err != nil || len(g.Image) != 7 || g.Config.Width != 50 {
		t.Errorf("GIF: %v frames of a %d-wide screen, %v", len(g.Image), g.Config.Width, err)
	}
	for name, b := range map[string][]byte{"30000² gray PNG": PNG(30000, 30000, 0, 8, false), "30000² gray JPEG": JPEG(30000, 30000, 1, false)} {
		if len(b) > 4<<20 {
			t.Errorf("the %s bomb is %d bytes", name, len(b))
		}
	}
}
