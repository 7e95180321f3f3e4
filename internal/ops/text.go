package ops

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SafeText renders an identifier for a terminal line: as it is, or quoted
// with Go escapes when it holds control or line-breaking characters,
// invalid UTF-8 or surrounding blanks; "" as "".
func SafeText(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) {
			return strconv.Quote(s)
		}
	}
	if strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}

// sortStrings sorts s in place.
func sortStrings(s []string) { slices.Sort(s) }
