package server

import (
	"strings"
	"testing"
)

func TestLabelSets(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "OPTIONS": "OPTIONS", "get": "other", "FOO": "other", "": "other"} {
		if got := methodLabel(in); got != want {
			t.Errorf("methodLabel(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int]string{200: "200", 503: "503", 0: "other", 99: "other", 600: "other", 1 << 20: "other"} {
		if got := statusLabel(in); got != want {
			t.Errorf("statusLabel(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"CONFIRMATION_REPLAYED": "CONFIRMATION_REPLAYED", "ZERO23_WITH_PP": "ZERO23_WITH_PP", "X": "X",
		"": "other", "_X": "other", "9X": "other", "lower": "other", "A-B": "other", "A B": "other",
		"eyJhbGciOiJFUzI1NiJ9.e30.sig": "other", strings.Repeat("A", 64): strings.Repeat("A", 64), strings.Repeat("A", 65): "other",
	} {
		if got := codeLabel(in); got != want {
			t.Errorf("codeLabel(%.20q) = %q, want %q", in, got, want)
		}
	}
}
