package docs

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Page is what the tests read of a Markdown page: its headings, the rows of
// its tables and its links, outside fenced code blocks.
type Page struct {
	Headings []Heading
	Rows     []Row
	Links    []Link
}

// Heading is one ATX heading (# …).
type Heading struct {
	Level int
	Text  string
	// Anchor is the id GitHub gives it (unique within the page).
	Anchor string
	// Words are the words of its code spans.
	Words []string
}

// Row is one table row with the headings it sits under, outermost first.
type Row struct {
	Line int
	// First are the words of the code spans of its first cell.
	First []string
	Under []Heading
}

// Link is one inline link or image, [text](target).
type Link struct {
	Line   int
	Target string
}

var (
	headingLine = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpan    = regexp.MustCompile("`+([^`]+)`+")
	word        = regexp.MustCompile(`[A-Za-z0-9_]+`)
	inlineLink  = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

// ParsePage reads a Markdown page.
func ParsePage(text string) Page {
	var p Page
	var stack []Heading
	anchors := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := headingLine.FindStringSubmatch(line); m != nil {
			h := Heading{Level: len(m[1]), Text: m[2], Words: codeWords(m[2])}
			slug := Slug(m[2])
			if n := anchors[slug]; n > 0 {
				h.Anchor = slug + "-" + strconv.Itoa(n)
			} else {
				h.Anchor = slug
			}
			anchors[slug]++
			for len(stack) > 0 && stack[len(stack)-1].Level >= h.Level {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, h)
			p.Headings = append(p.Headings, h)
			continue
		}
		outsideCode := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(outsideCode, -1) {
			p.Links = append(p.Links, Link{Line: i + 1, Target: m[1]})
		}
		if strings.HasPrefix(trimmed, "|") && !isSeparatorRow(trimmed) {
			p.Rows = append(p.Rows, Row{Line: i + 1, First: codeWords(firstCell(trimmed)),
				Under: append([]Heading(nil), stack...)})
		}
	}
	return p
}

// Slug is the anchor GitHub makes of a heading: lower case, punctuation
// other than - and _ dropped, spaces made hyphens.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// codeWords are the words inside the code spans of s.
func codeWords(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, word.FindAllString(m[1], -1)...)
	}
	return out
}

// firstCell is a table row's first cell (a | inside it is written \|).
func firstCell(row string) string {
	row = strings.TrimPrefix(row, "|")
	for i := 0; i < len(row); i++ {
		if row[i] == '\\' {
			i++
			continue
		}
		if row[i] == '|' {
			return row[:i]
		}
	}
	return row
}

func isSeparatorRow(row string) bool {
	return strings.Trim(row, "|-: ") == ""
}
