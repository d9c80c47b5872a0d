package builtin

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"testing"
)

// img builds a 1-frame RGB image from rows of [r,g,b] triples.
func img(t *testing.T, rows [][][3]float32) *Image {
	t.Helper()
	h, w := len(rows), len(rows[0])
	im, err := newImage(1, h, w)
	if err != nil {
		t.Fatal(err)
	}
	for y, row := range rows {
		for x, p := range row {
			copy(im.Pix[(y*w+x)*3:], p[:])
		}
	}
	return im
}

// gray builds a 1-frame image whose pixel (y, x) has all channels v[y][x].
func gray(t *testing.T, v [][]float32) *Image {
	t.Helper()
	rows := make([][][3]float32, len(v))
	for y := range v {
		for _, p := range v[y] {
			rows[y] = append(rows[y], [3]float32{p, p, p})
		}
	}
	return img(t, rows)
}

// grayOf extracts channel 0 of frame 0 as rows.
func grayOf(im *Image) [][]float32 {
	out := make([][]float32, im.H)
	for y := range out {
		for x := 0; x < im.W; x++ {
			out[y] = append(out[y], im.Pix[(y*im.W+x)*im.C])
		}
	}
	return out
}

func equalRows(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func encodePNG(t *testing.T, m image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// opener serves named files from memory.
func opener(files map[string][]byte) func(context.Context, string) (io.ReadCloser, error) {
	return func(_ context.Context, name string) (io.ReadCloser, error) {
		b, ok := files[name]
		if !ok {
			return nil, io.ErrUnexpectedEOF
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
}

// callNode runs one node class on already-resolved inputs: links are given
// as values under "__linked__<name>" so tests can feed tensors directly.
func callNode(t *testing.T, class string, inputs map[string]any, env Env) ([]any, error) {
	t.Helper()
	c := nodeCallFor(t, class, inputs, env)
	return c.def.run(c)
}

// nodeCallFor is callNode's call, not yet run.
func nodeCallFor(t *testing.T, class string, inputs map[string]any, env Env) *nodeCall {
	t.Helper()
	d, ok := catalog[class]
	if !ok {
		t.Fatalf("no class %s", class)
	}
	r := newRun(nil, env, 0)
	node := Node{ClassType: class, Inputs: map[string]any{}}
	for k, v := range inputs {
		switch v.(type) {
		case *Image, *Mask:
			src := "src_" + k
			r.results[src] = []any{v}
			node.Inputs[k] = []any{src, float64(0)}
		default:
			node.Inputs[k] = v
		}
	}
	r.prompt = map[string]Node{"n": node}
	return &nodeCall{ctx: context.Background(), run: r, id: "n", def: d, node: node}
}
