package builtin

import (
	"context"
	"errors"
	"testing"
)

// TestBlurStopsWhenCanceled: a blur, whose cost grows with the radius, checks
// the context inside the node rather than only between nodes.
func TestBlurStopsWhenCanceled(t *testing.T) {
	im := &Image{B: 1, H: 64, W: 64, C: 3, Pix: make([]float32, 64*64*3)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := blur(ctx, im, 31, 1)
	if !errors.Is(err, context.Canceled) || out != nil {
		t.Fatalf("blur with a canceled context = %v, %v; want nil, context.Canceled", out, err)
	}
	if out, err := blur(context.Background(), im, 31, 1); err != nil || out == nil {
		t.Fatalf("blur = %v, %v", out, err)
	}
}
