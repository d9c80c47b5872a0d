package chaos

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoakSectionCarriesOver: a report written without a soak keeps the
// last report's soak section as it was, also when carried twice.
func TestSoakSectionCarriesOver(t *testing.T) {
	old, err := os.ReadFile("../../RELIABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	section := SoakSection(string(old))
	if !strings.Contains(section, "![soak](") {
		t.Fatalf("the committed RELIABILITY.md has no soak section with its plot:\n%s", section)
	}
	once := Markdown(nil, nil, section, true, time.Now())
	twice := Markdown(nil, nil, SoakSection(once), true, time.Now())
	if got := SoakSection(twice); got != section {
		t.Fatalf("carried twice:\n%s\nwant:\n%s", got, section)
	}
	if !strings.Contains(twice, carriedMark) || strings.Count(twice, carriedMark) != 1 {
		t.Fatalf("the carried section is not marked once:\n%s", twice)
	}
}
