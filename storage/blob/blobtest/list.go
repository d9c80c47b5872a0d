package blobtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/comfygate/comfygate/storage/blob"
)

// testList: List walks the published objects of both layouts in order,
// page by page, and lists neither an upload in progress (nor one published
// over a held object) nor a removed object.
func testList(t *testing.T, h Harness) {
	s := h.Store
	list := func(after blob.Ref, limit int) []blob.Ref {
		t.Helper()
		got, err := s.List(ctx(t), after, limit)
		if err != nil {
			t.Fatalf("List(%+v, %d): %v", after, limit, err)
		}
		return got
	}
	if got := list(blob.Ref{}, 10); len(got) != 0 {
		t.Fatalf("List of an empty store = %v", got)
	}
	var want []blob.Ref
	for i := range 6 {
		data := randomBytes(100+i, uint64(40+i))
		expected := ""
		if i%2 == 1 {
			expected = hashOf(data)
		}
		want = append(want, put(t, s, data, expected))
	}
	// One more that is large (the streaming path), one in progress, and
	// one that kept the object of bytes already stored.
	want = append(want, put(t, s, randomBytes(2*h.Large+3, 47)))
	dup := randomBytes(2*h.Large+3, 47)
	kept, err := s.NewUpload(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Write(dup); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kept.Finish(); err != nil {
		t.Fatal(err)
	}
	if ref, err := kept.Publish(&want[len(want)-1]); err != nil || ref != want[len(want)-1] {
		t.Fatalf("Publish over a held object = %+v, %v", ref, err)
	}
	if err := kept.Abort(); err != nil {
		t.Fatal(err)
	}
	pending, err := s.NewUpload(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Abort()
	if _, err := pending.Write(randomBytes(2*h.Large+5, 48)); err != nil {
		t.Fatal(err)
	}
	// Listed, a keyed object is named by its key alone.
	for i := range want {
		if want[i].Key != "" {
			want[i].Hash = ""
		}
	}
	got := list(blob.Ref{}, 100)
	if len(got) != len(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for _, r := range want {
		if !slices.Contains(got, r) {
			t.Fatalf("List = %v, want %v", got, want)
		}
	}
	want = got // the store's order; the pages below must follow it
	var walked []blob.Ref
	for after := (blob.Ref{}); ; {
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
	if got := list(blob.Ref{}, 100); !slices.Equal(got, want[1:]) {
		t.Fatalf("List after a remove = %v, want %v", got, want[1:])
	}
	if _, err := s.List(ctx(t), blob.Ref{Hash: "blake3:nothex"}, 10); !errors.Is(err, blob.ErrInvalidHash) {
		t.Fatalf("List after a malformed address: %v, want ErrInvalidHash", err)
	}
}
