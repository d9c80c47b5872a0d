package workflow

import (
	"fmt"
	"testing"
	"unsafe"
)

func TestInternSharesAndStaysBounded(t *testing.T) {
	a := intern([]byte("class_type"))
	b := intern([]byte("class_type"))
	if a != "class_type" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("intern did not share %q", a)
	}
	long := make([]byte, maxInternBytes+1)
	if s := intern(long); len(s) != len(long) {
		t.Fatalf("long string: %d bytes", len(s))
	}
	for i := range maxInterned + 10 {
		if s := intern(fmt.Appendf(nil, "name-%d", i)); s != fmt.Sprintf("name-%d", i) {
			t.Fatalf("intern(name-%d) = %q", i, s)
		}
	}
	if n := len(*interned.m.Load()); n > maxInterned {
		t.Fatalf("%d strings interned, bound %d", n, maxInterned)
	}
	if s := intern([]byte("class_type")); unsafe.StringData(s) != unsafe.StringData(a) {
		t.Fatal("a string interned before the table filled is no longer shared")
	}
}
