// Package inert makes a string from outside — a server's answer, a file, a
// token claim, a decision log — safe to print on a terminal: Text escapes
// every character a terminal acts on instead of showing, so such a string
// can neither clear the screen, set the window title, write the clipboard
// (OSC 52), reorder what is shown (bidi overrides) nor start a line of its
// own (a forged "ALLOW").
package inert

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s with every character a terminal would act on written as
// an escape, and every other character unchanged:
//   - C0 controls and DEL: \n, \r, \t, or \xNN (ESC is \x1b: no CSI, OSC,
//     DCS or other escape sequence can start);
//   - C1 controls U+0080–U+009F (8-bit CSI U+009B, OSC U+009D …): \u009b;
//   - bidi controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069)
//     and the line and paragraph separators U+2028, U+2029: \u202e;
//   - each byte that is not part of valid UTF-8 (a lone 0x9b is CSI to an
//     8-bit terminal): \xNN.
//
// Text is for human output only; JSON output is written unchanged.
func Text(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Safe reports whether s prints as itself: Text(s) == s.
func Safe(s string) bool { return firstUnsafe(s) < 0 }

// firstUnsafe is the index of the first byte Text changes, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || unsafeRune(r) {
			return i
		}
		i += n
	}
	return -1
}

// unsafeRune: a C1 control, a bidi control or a line/paragraph separator.
func unsafeRune(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029
}
