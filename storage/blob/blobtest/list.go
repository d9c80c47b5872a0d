package blobtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/comfygate/comfygate/storage/blob"
)

// testList: List walks the published objects in address order, page by
// page, and lists neither an upload in progress nor a removed object.
func testList(t *testing.T, h Harness) {
	s := h.Store
	list := func(after string, limit int) []string {
		t.Helper()
		got, err := s.List(ctx(t), after, limit)
		if err != nil {
			t.Fatalf("List(%q, %d): %v", after, limit, err)
		}
		return got
	}
	if got := list("", 10); len(got) != 0 {
		t.Fatalf("List of an empty store = %v", got)
	}
	var want []string
	for i := range 5 {
		want = append(want, put(t, s, randomBytes(100+i, uint64(40+i))))
	}
	// One more that is large (the streaming path), and one in progress.
	want = append(want, put(t, s, randomBytes(2*h.Large+3, 47)))
	pending, err := s.NewUpload(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Abort()
	if _, err := pending.Write(randomBytes(2*h.Large+5, 48)); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)

	if got := list("", 100); !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	var walked []string
	for after := ""; ; {
		page := list(after, 2)
		if len(page) > 2 {
			t.Fatalf("a page of limit 2 holds %d", len(page))
		}
		if len(page) == 0 {
			break
		}
		walked = append(walked, page...)
		after = page[len(page)-1]
	}
	if !slices.Equal(walked, want) {
		t.Fatalf("paged walk = %v, want %v", walked, want)
	}
	if got := list(want[2], 100); !slices.Equal(got, want[3:]) {
		t.Fatalf("List after the third = %v, want %v", got, want[3:])
	}
	if err := s.Remove(ctx(t), want[0]); err != nil {
		t.Fatal(err)
	}
	if got := list("", 100); !slices.Equal(got, want[1:]) {
		t.Fatalf("List after a remove = %v, want %v", got, want[1:])
	}
	if _, err := s.List(ctx(t), "blake3:nothex", 10); !errors.Is(err, blob.ErrInvalidHash) {
		t.Fatalf("List after a malformed address: %v, want ErrInvalidHash", err)
	}
}
