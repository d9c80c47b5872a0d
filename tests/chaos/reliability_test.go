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
	once := Markdown(nil, nil, nil, section, true, time.Now())
	twice := Markdown(nil, nil, nil, SoakSection(once), true, time.Now())
	if got := SoakSection(twice); got != section {
		t.Fatalf("carried twice:\n%s\nwant:\n%s", got, section)
	}
	if !strings.Contains(twice, carriedMark) || strings.Count(twice, carriedMark) != 1 {
		t.Fatalf("the carried section is not marked once:\n%s", twice)
	}
}

// TestRowsCarryOver: a report of some scenarios keeps the last report's
// rows of the others where they were, replaces the rows of those that ran
// and appends new ones.
func TestRowsCarryOver(t *testing.T) {
	last := Markdown([]Result{{Scenario: "a", Fault: "fa"}, {Scenario: "b", Fault: "fb"}, {Scenario: "c", Fault: "fc"}},
		nil, nil, "", true, time.Now())
	rows := TableRows(last)
	if len(rows) != 3 {
		t.Fatalf("rows of the last report: %q", rows)
	}
	md := Markdown([]Result{{Scenario: "b", Fault: "fb2"}, {Scenario: "d", Fault: "fd"}}, rows, nil, "", true, time.Now())
	got := TableRows(md)
	var names, faults []string
	for _, r := range got {
		names = append(names, rowScenario(r))
		faults = append(faults, strings.Split(r, " | ")[1])
	}
	if strings.Join(names, ",") != "a,b,c,d" || strings.Join(faults, ",") != "fa,fb2,fc,fd" {
		t.Fatalf("rows %q", got)
	}
	if !strings.Contains(md, "carried over unchanged from the last report: a, c.") {
		t.Fatalf("no carry note:\n%s", md)
	}
	if again := TableRows(Markdown(nil, got, nil, "", true, time.Now())); strings.Join(again, "") != strings.Join(got, "") {
		t.Fatalf("carried twice: %q", again)
	}
}

// TestReportHasTheNotes: the committed RELIABILITY.md carries the fault
// matrix section and every open and fixed note as the generator writes
// them, so that a note changed here (or in the report) is changed in both.
func TestReportHasTheNotes(t *testing.T) {
	md, err := os.ReadFile("../../RELIABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{faultMatrixSection}, notesAsWritten()...) {
		if !strings.Contains(string(md), want) {
			t.Errorf("RELIABILITY.md lacks, as the generator writes it:\n%s", want)
		}
	}
}

func notesAsWritten() []string {
	var out []string
	for _, n := range append(append([]string{}, openNotes...), fixedNotes...) {
		out = append(out, "- "+n+"\n")
	}
	return out
}
