package jobs

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/comfygate/comfygate/storage"
)

func TestRunLog(t *testing.T) {
	const limit = 1000
	at := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.FixedZone("x", 3600))
	cases := []struct {
		name      string
		writes    []string
		want      string // exact text, when not truncated
		truncated bool
		head      string // for truncated logs: how the text starts
		tail      string // and ends
	}{
		{"empty", nil, "", false, "", ""},
		{"lines", []string{"got prompt\n", "Prompt executed in 0.01 seconds\n"}, "got prompt\nPrompt executed in 0.01 seconds\n", false, "", ""},
		{"exactly at the limit", []string{strings.Repeat("a", limit)}, strings.Repeat("a", limit), false, "", ""},
		{"invalid bytes and NUL", []string{"a\xffb\x00c"}, "a\uFFFDbc", false, "", ""},
		{"one over", []string{strings.Repeat("a", limit), "Z"}, "", true, strings.Repeat("a", limit/2) + "\n[… 97 bytes", strings.Repeat("a", 403) + "Z"},
		{"long run keeps head and latest tail", []string{"got prompt\n", strings.Repeat("x", 5000), "Traceback\nPrompt executed in 9.00 seconds\n"},
			"", true, "got prompt\nxxxx", "xxTraceback\nPrompt executed in 9.00 seconds\n"},
		{"runes never split", []string{strings.Repeat("é", 2000)}, "", true, "éé", "éé"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewRunLog(limit)
			for _, w := range c.writes {
				l.Write([]byte(w))
			}
			got := l.JobLog(at)
			if !got.CapturedAt.Equal(at.Truncate(time.Microsecond)) || got.CapturedAt.Location() != time.UTC {
				t.Errorf("CapturedAt = %v", got.CapturedAt)
			}
			if !storage.ValidJobLog(got) || len(got.Text) > limit {
				t.Fatalf("not storable: %d bytes, valid UTF-8 %v", len(got.Text), utf8.ValidString(got.Text))
			}
			if got.Truncated != c.truncated {
				t.Fatalf("Truncated = %v, want %v", got.Truncated, c.truncated)
			}
			if !c.truncated {
				if got.Text != c.want {
					t.Errorf("Text = %q, want %q", got.Text, c.want)
				}
				return
			}
			if !strings.HasPrefix(got.Text, c.head) || !strings.HasSuffix(got.Text, c.tail) || !strings.Contains(got.Text, "bytes of the run log left out") {
				t.Errorf("Text = %q…%q", got.Text[:min(60, len(got.Text))], got.Text[max(0, len(got.Text)-60):])
			}
		})
	}
}

// TestRunLogAccounting checks, over random writes, that the text never
// passes the limit and that head + left out + tail is everything written.
func TestRunLogAccounting(t *testing.T) {
	const limit = 500
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		l := NewRunLog(limit)
		var all strings.Builder
		for range r.IntN(40) {
			w := strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(120))
			l.Write([]byte(w))
			all.WriteString(w)
		}
		got := l.JobLog(time.Now())
		if len(got.Text) > limit || !storage.ValidJobLog(got) {
			t.Fatalf("round %d: %d bytes", round, len(got.Text))
		}
		if !got.Truncated {
			if got.Text != all.String() {
				t.Fatalf("round %d: lost text without truncating", round)
			}
			continue
		}
		head, rest, ok := strings.Cut(got.Text, "\n[… ")
		if !ok || !strings.HasPrefix(all.String(), head) {
			t.Fatalf("round %d: head is not the start of the run", round)
		}
		_, tail, _ := strings.Cut(rest, " left out …]\n")
		if !strings.HasSuffix(all.String(), tail) {
			t.Fatalf("round %d: tail is not the end of the run", round)
		}
	}
}

func TestNilRunLogDiscards(t *testing.T) {
	var l *RunLog
	l.Printf("x %d", 1)
	if n, err := l.Write([]byte("abc")); n != 3 || err != nil {
		t.Errorf("Write = %d, %v", n, err)
	}
}
