package inert

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain ASCII: run_01 sha256:00ff", "plain ASCII: run_01 sha256:00ff"},
		{"héllo wörld ✓ 日本 🚀", "héllo wörld ✓ 日本 🚀"},
		{"a\nALLOW  forged", `a\nALLOW  forged`},
		{"tab\tcr\r", `tab\tcr\r`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},                       // CSI: clear screen
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},                 // OSC 0: window title
		{"\x1b]52;c;ZXZpbA==\x1b\\", `\x1b]52;c;ZXZpbA==\x1b\`},  // OSC 52: clipboard
		{"\x00\x7f", `\x00\x7f`},                                 // NUL, DEL
		{"\u009b31m\u009d0;t\u009c", `\u009b31m\u009d0;t\u009c`}, // C1 CSI, OSC, ST
		{"\xc2\x9b", `\u009b`},                                   // C1 CSI in UTF-8
		{"\x9b31m", `\x9b31m`},                                   // lone 8-bit CSI, invalid UTF-8
		{"\xff\xfe", `\xff\xfe`},                                 // invalid UTF-8
		{"evil\u202Egnp.exe", `evil\u202egnp.exe`},               // RLO
		{"\u202A\u202B\u202C\u202D", `\u202a\u202b\u202c\u202d`}, // LRE RLE PDF LRO
		{"\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`}, // LRI RLI FSI PDI
		{"\u200E\u200F\u061C", `\u200e\u200f\u061c`},             // LRM RLM ALM
		{"line\u2028sep\u2029", `line\u2028sep\u2029`},           // line/paragraph separators
	} {
		got := Text(tc.in)
		if got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if Safe(tc.in) != (tc.in == tc.want) {
			t.Errorf("Safe(%q) = %v", tc.in, Safe(tc.in))
		}
		if !Safe(got) {
			t.Errorf("Text(%q) = %q is not safe itself", tc.in, got)
		}
	}
}

// TestTextEveryRune: over every rune and every byte, Text's result holds no
// C0, DEL, C1, bidi control, separator or invalid UTF-8, and changes only
// what it must.
func TestTextEveryRune(t *testing.T) {
	for r := rune(0); r <= 0x10ffff; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		s := string(r)
		out := Text(s)
		bad := r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x061c || r == 0x200e || r == 0x200f ||
			(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x2028 || r == 0x2029
		if bad == (out == s) {
			t.Fatalf("Text(%U) = %q", r, out)
		}
		if bad && (!utf8.ValidString(out) || strings.ContainsFunc(out, func(r rune) bool { return r < 0x20 || r >= 0x7f })) {
			t.Fatalf("Text(%U) = %q keeps a control", r, out)
		}
	}
	for c := 0x80; c <= 0xff; c++ {
		if out := Text(string([]byte{byte(c)})); out != `\x`+string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15]) {
			t.Fatalf("Text(byte %#x) = %q", c, out)
		}
	}
}
