package ledger

import (
	"strings"
	"testing"
	"time"
)

func TestNewConfirmationRef(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		ref := NewConfirmationRef()
		if !IsConfirmationRef(ref) || len(ref) != 36 {
			t.Fatalf("NewConfirmationRef() = %q, not cfr_ + 32 lowercase hex", ref)
		}
		if seen[ref] {
			t.Fatalf("NewConfirmationRef repeated %q", ref)
		}
		seen[ref] = true
	}
}

func TestNewRunID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewRunID()
		if !IsRunID(id) || len(id) != 30 {
			t.Fatalf("NewRunID() = %q, not run_ + 26 Crockford base32", id)
		}
		if seen[id] {
			t.Fatalf("NewRunID repeated %q", id)
		}
		seen[id] = true
	}
	// Later milliseconds sort later.
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	a, b := newRunID(t0), newRunID(t0.Add(time.Millisecond))
	if a[:14] >= b[:14] {
		t.Fatalf("run ids do not sort by time: %s then %s", a, b)
	}
	// The ULID time prefix is exact: the all-zero and all-one values.
	if got := encodeULID([16]byte{}); got != strings.Repeat("0", 26) {
		t.Fatalf("encodeULID(0) = %s", got)
	}
	var ones [16]byte
	for i := range ones {
		ones[i] = 0xff
	}
	if got := encodeULID(ones); got != "7"+strings.Repeat("z", 25) {
		t.Fatalf("encodeULID(2^128-1) = %s", got)
	}
}

func TestShapes(t *testing.T) {
	for _, tc := range []struct {
		s         string
		ref, run  bool
		sha256Dig bool
	}{
		{s: "cfr_0123456789abcdef0123456789abcdef", ref: true},
		{s: "cfr_0123456789ABCDEF0123456789abcdef"},
		{s: "cfr_0123456789abcdef0123456789abcde"},
		{s: "cfr_0123456789abcdef0123456789abcdef0"},
		{s: "CFR_0123456789abcdef0123456789abcdef"},
		{s: "run_01jdz7a3q4r5s6t7v8w9x0y1z2", run: true},
		{s: "run_81jdz7a3q4r5s6t7v8w9x0y1z2"}, // over 128 bits
		{s: "run_01jdz7a3q4r5s6t7v8w9x0y1zi"}, // i is not Crockford
		{s: "run_01JDZ7A3Q4R5S6T7V8W9X0Y1Z2"},
		{s: "run_01jdz7a3q4r5s6t7v8w9x0y1z"},
		{s: "sha256:" + strings.Repeat("a", 64), sha256Dig: true},
		{s: "sha256:" + strings.Repeat("A", 64)},
		{s: "sha256:" + strings.Repeat("a", 63)},
		{s: "sha512:" + strings.Repeat("a", 64)},
		{s: ""},
	} {
		if got := IsConfirmationRef(tc.s); got != tc.ref {
			t.Errorf("IsConfirmationRef(%q) = %v", tc.s, got)
		}
		if got := IsRunID(tc.s); got != tc.run {
			t.Errorf("IsRunID(%q) = %v", tc.s, got)
		}
		if got := IsSHA256Digest(tc.s); got != tc.sha256Dig {
			t.Errorf("IsSHA256Digest(%q) = %v", tc.s, got)
		}
	}
}
