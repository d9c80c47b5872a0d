package blob

import (
	"errors"
	"strings"
	"testing"
)

func TestParseHash(t *testing.T) {
	lower := strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "lowercase", in: "blake3:" + lower, want: "blake3:" + lower},
		{name: "uppercase hex is lowercased", in: "blake3:" + strings.ToUpper(lower), want: "blake3:" + lower},
		{name: "uppercase prefix", in: "BLAKE3:" + lower, wantErr: true},
		{name: "other algorithm", in: "sha256:" + lower, wantErr: true},
		{name: "no prefix", in: lower, wantErr: true},
		{name: "short", in: "blake3:" + lower[:63], wantErr: true},
		{name: "long", in: "blake3:" + lower + "0", wantErr: true},
		{name: "non hex", in: "blake3:" + lower[:63] + "g", wantErr: true},
		{name: "traversal", in: "blake3:../../" + lower[:58], wantErr: true},
		{name: "whitespace", in: " blake3:" + lower[:63], wantErr: true},
		{name: "empty", in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHash(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidHash) {
					t.Fatalf("ParseHash(%q) = %q, %v; want ErrInvalidHash", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseHash(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}
