package decisionlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type maskFunc func(map[string]any) ([]string, error)

func (f maskFunc) Mask(_ context.Context, in map[string]any) ([]string, error) { return f(in) }

func event(input map[string]any) Event {
	return Event{DecisionID: "dec_1", Time: time.Unix(1764403200, 0).UTC(), Account: "acct", Result: "deny",
		Codes: []string{"X"}, Input: input}
}

func TestPrepareMasksAndGuards(t *testing.T) {
	t.Parallel()
	jwt := "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl"
	cases := []struct {
		name    string
		input   map[string]any
		mask    maskFunc
		written bool
		reason  string
		absent  string
	}{
		{"clean", map[string]any{"manifest": map[string]any{"name": "llama"}}, nil, true, "", ""},
		{"masked credential", map[string]any{"manifest": map[string]any{"uri": "https://u:p@host/x"}, "now": 1},
			func(map[string]any) ([]string, error) { return []string{"/manifest"}, nil }, true, "", "u:p@"},
		// What the guard refuses is redacted, the event kept (an allowed
		// admission always has its record).
		{"unmasked credential is redacted", map[string]any{"manifest": map[string]any{"uri": "https://u:p@host/x"}},
			func(map[string]any) ([]string, error) { return nil, nil }, true, "", "u:p@"},
		{"token shape is redacted", map[string]any{"note": jwt}, nil, true, "", jwt[:20]},
		{"signature shape is redacted", map[string]any{"sig": strings.Repeat("MEUCIQ", 16)}, nil, true, "", "MEUCIQMEUCIQ"},
		{"pem is redacted", map[string]any{"k": "-----BEGIN PUBLIC KEY-----"}, nil, true, "", "BEGIN"},
		{"secret-shaped key drops the input", map[string]any{jwt: 1, "a": "b"}, nil, true, "", jwt[:20]},
		{"mask failure drops", map[string]any{"a": 1},
			func(map[string]any) ([]string, error) { return nil, errors.New("boom") }, false, "mask_failed", ""},
		{"bad pointer drops", map[string]any{"a": 1},
			func(map[string]any) ([]string, error) { return []string{"manifest"}, nil }, false, "mask_failed", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			l := New(&buf, Options{})
			ev := event(tc.input)
			var m Masker
			if tc.mask != nil {
				m = tc.mask
			}
			if ok := l.Prepare(context.Background(), m, &ev); ok {
				l.Log(ev)
			}
			l.Close()
			if got := l.Written() == 1; got != tc.written {
				t.Fatalf("written=%v want %v (%s)", got, tc.written, buf.String())
			}
			if tc.reason != "" && l.Dropped(tc.reason) != 1 {
				t.Fatalf("dropped[%s]=%d", tc.reason, l.Dropped(tc.reason))
			}
			if !tc.written && buf.Len() != 0 {
				t.Fatalf("a refused event was written: %s", buf.String())
			}
			if tc.absent != "" && strings.Contains(buf.String(), tc.absent) {
				t.Fatalf("masked value in log: %s", buf.String())
			}
		})
	}
}

func TestRemoveCopiesAndHandlesArrays(t *testing.T) {
	t.Parallel()
	in := map[string]any{"a": map[string]any{"b": 1, "c/d": 2}, "l": []any{"x", "y"}}
	out, err := Remove(in, []string{"/a/b", "/a/c~1d", "/l/0", "/missing/x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out["a"].(map[string]any)) != 0 || out["l"].([]any)[0] != nil || out["l"].([]any)[1] != "y" {
		t.Fatalf("removed %v", out)
	}
	if in["a"].(map[string]any)["b"] != 1 || in["l"].([]any)[0] != "x" {
		t.Fatal("Remove changed its input")
	}
}

func TestReadRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := New(&buf, Options{})
	for i := 0; i < 3; i++ {
		ev := event(map[string]any{"now": 1764403200})
		if l.Prepare(context.Background(), nil, &ev) {
			l.Log(ev)
		}
	}
	l.Close()
	evs, err := Read(&buf)
	if err != nil || len(evs) != 3 || evs[0].Input["now"].(interface{ String() string }).String() != "1764403200" {
		t.Fatalf("Read = %d events, %v", len(evs), err)
	}
	if _, err := Read(strings.NewReader("")); !errors.Is(err, ErrNoEvents) {
		t.Fatalf("empty log: %v", err)
	}
}

func TestLongBase64Run(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		strings.Repeat("A", 87):                     false,
		strings.Repeat("A", 88):                     true,
		"x:" + strings.Repeat("ab+/", 22) + "=":     true,
		strings.Repeat("abc-", 40):                  false, // '-' breaks every run
		"sha256:" + strings.Repeat("0f", 32):        false, // a 64-hex digest is fine
		`{"a":"` + strings.Repeat("Zz9", 30) + `"}`: true,
	}
	for in, want := range cases {
		if got := longBase64Run([]byte(in), 88); got != want {
			t.Errorf("longBase64Run(%q) = %v, want %v", in, got, want)
		}
	}
}

func BenchmarkGuard(b *testing.B) {
	ev := event(map[string]any{"manifest": map[string]any{"name": strings.Repeat("llama-3-8b ", 400)}})
	raw, _ := json.Marshal(ev)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if Guard(raw) != "" {
			b.Fatal("clean event refused")
		}
	}
}

// TestSecretShapedKeyKeepsTheEvent: an idempotency key shaped like a JWT or
// an AWS key id is replaced by a stand-in key carrying its SHA-256 — in the event
// and in its input — and the event is written: a caller cannot erase its
// admission from the audit log by choosing such a key.
func TestSecretShapedKeyKeepsTheEvent(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl", "AKIAIOSFODNN7EXAMPLE"} {
		var buf bytes.Buffer
		l := New(&buf, Options{})
		ev := event(map[string]any{"request": map[string]any{"idempotency_key": key, "n": json.Number("123456789012345678901")}})
		ev.IdempotencyKey, ev.Result = key, "allow"
		if !l.Prepare(context.Background(), nil, &ev) {
			t.Fatalf("event with key %s dropped", key)
		}
		l.Log(ev)
		l.Close()
		got, err := Read(strings.NewReader(buf.String()))
		if err != nil || len(got) != 1 {
			t.Fatalf("Read = %d events, %v", len(got), err)
		}
		sum := sha256.Sum256([]byte(key))
		marker := "redacted.sha256." + hex.EncodeToString(sum[:])
		req, _ := got[0].Input["request"].(map[string]any)
		if strings.Contains(buf.String(), key) || got[0].IdempotencyKey != marker || req["idempotency_key"] != marker ||
			strings.Join(got[0].Redacted, ",") != "/idempotency_key,/input/request/idempotency_key" && strings.Join(got[0].Redacted, ",") != "/input/request/idempotency_key,/idempotency_key" {
			t.Fatalf("key %s: %s", key, buf.String())
		}
		if !strings.Contains(buf.String(), `"n":123456789012345678901`) {
			t.Fatalf("a number changed in the round trip: %s", buf.String())
		}
	}
}
