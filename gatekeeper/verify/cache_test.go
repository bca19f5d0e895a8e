package verify_test

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// cacheBound is the per-entry memory bound the TokenVerifier docs state.
const cacheBound = 12 << 10

// cachedVerifier is the test entitlement verifier with a cache of entries.
func cachedVerifier(t *testing.T, entries int) *verify.TokenVerifier {
	t.Helper()
	return newVerifier(t, verify.PurposeEntitlement, keys.Dev().Entitlement, testTyp, func(o *verify.TokenOptions) {
		o.CacheEntries = entries
	})
}

func mintEntitlement(t testing.TB, claims map[string]any) []byte {
	t.Helper()
	raw, err := token.Mint(keys.Dev().Entitlement.Private, keys.EntitlementKeyID, "ES256", testTyp, claims)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// sameResult fails unless two Verify results are identical: equal claims,
// or *verify.Error values with the same purpose, kind and reason.
func sameResult(t *testing.T, gotC *verify.Claims, gotErr error, wantC *verify.Claims, wantErr error) {
	t.Helper()
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("cached err = %v, uncached err = %v", gotErr, wantErr)
	}
	if wantErr != nil {
		var g, w *verify.Error
		if !errors.As(gotErr, &g) || !errors.As(wantErr, &w) {
			t.Fatalf("errors are not *verify.Error: %T, %T", gotErr, wantErr)
		}
		if g.Purpose != w.Purpose || g.Kind != w.Kind || g.Error() != w.Error() {
			t.Fatalf("cached err = %q (%s/%s), uncached err = %q (%s/%s)", g, g.Purpose, g.Kind, w, w.Purpose, w.Kind)
		}
		if gotC != nil {
			t.Fatal("claims returned with an error")
		}
		return
	}
	if !reflect.DeepEqual(gotC, wantC) {
		t.Fatalf("cached claims = %+v\nuncached claims = %+v", gotC, wantC)
	}
}

// TestTokenCacheSameResultAsFullVerification: a hit re-checks exp, nbf and
// iat against each now exactly as a full verification does, including the
// order of the checks and the leeway edges.
func TestTokenCacheSameResultAsFullVerification(t *testing.T) {
	t.Parallel()
	lee := verify.DefaultLeeway
	sec := func(d time.Duration) int64 { return now.Add(d).Unix() }
	tokens := []struct {
		name   string
		claims map[string]any
		valid  time.Time // a now at which the token verifies
	}{
		{"exp and iat", with(baseClaims(), "iat", sec(-10*time.Second), "exp", sec(300*time.Second)), now},
		{"with nbf", with(baseClaims(), "nbf", sec(60*time.Second), "iat", sec(0), "exp", sec(600*time.Second)), now.Add(120 * time.Second)},
		{"fractional exp and nbf", with(baseClaims(), "nbf", float64(sec(60*time.Second))+0.25, "exp", float64(sec(600*time.Second))+0.75), now.Add(120 * time.Second)},
		{"iat in the future, nbf earlier", with(baseClaims(), "iat", sec(100*time.Second), "nbf", sec(50*time.Second), "exp", sec(500*time.Second)), now.Add(120 * time.Second)},
		// exp before nbf: valid only within the leeways; after exp the
		// expiry is reported even though nbf is also unmet.
		{"nbf after exp", with(baseClaims(), "iat", sec(0), "nbf", sec(200*time.Second), "exp", sec(190*time.Second)), now.Add(195 * time.Second)},
	}
	for _, tk := range tokens {
		t.Run(tk.name, func(t *testing.T) {
			t.Parallel()
			raw := mintEntitlement(t, tk.claims)
			plain := newVerifier(t, verify.PurposeEntitlement, keys.Dev().Entitlement, testTyp, nil)
			cached := cachedVerifier(t, 8)
			base, err := plain.Verify(raw, tk.valid)
			if err != nil {
				t.Fatalf("token does not verify at its valid time: %v", err)
			}
			// Every instant where a result can change, ±1 ns and ±1 s.
			var edges []time.Time
			for _, at := range []time.Time{base.Expiry.Add(lee), base.NotBefore.Add(-lee), base.IssuedAt.Add(-lee), base.IssuedAt, base.Expiry} {
				if at.Unix() <= 0 {
					continue
				}
				for _, d := range []time.Duration{-time.Second, -time.Nanosecond, 0, time.Nanosecond, time.Second} {
					edges = append(edges, at.Add(d))
				}
			}
			edges = append(edges, time.Unix(0, 0), now.Add(-24*time.Hour), tk.valid, now.Add(24*time.Hour))
			kinds := map[string]bool{}
			for _, at := range edges {
				// Prime the cache at a valid now, then ask at `at`: a hit.
				if _, err := cached.Verify(raw, tk.valid); err != nil {
					t.Fatalf("prime: %v", err)
				}
				before := cached.CacheStats()
				gotC, gotErr := cached.Verify(raw, at)
				if after := cached.CacheStats(); after.Hits != before.Hits+1 {
					t.Fatalf("now %v: not answered from the cache (stats %+v → %+v)", at, before, after)
				}
				wantC, wantErr := plain.Verify(raw, at)
				sameResult(t, gotC, gotErr, wantC, wantErr)
				if k, failed := verify.KindOf(wantErr); failed {
					kinds[k.String()] = true
				} else {
					kinds["ok"] = true
				}
			}
			t.Logf("outcomes covered: %v", kinds)
		})
	}
}

// TestTokenCacheOutcomesCovered: the edges above reach every time-dependent
// outcome (guards the test against a table that only ever succeeds).
func TestTokenCacheOutcomesCovered(t *testing.T) {
	t.Parallel()
	raw := mintEntitlement(t, with(baseClaims(), "iat", now.Unix()+100, "nbf", now.Unix()+50, "exp", now.Unix()+500))
	cached := cachedVerifier(t, 8)
	valid := now.Add(100 * time.Second)
	for _, tc := range []struct {
		at   time.Time
		want verify.Kind
	}{
		{valid, 0},
		{now, verify.KindNotYetValid}, // nbf - leeway is now+20s
		{now.Add(60 * time.Second), verify.KindIssuedInFuture}, // nbf met, iat - leeway is now+70s
		{now.Add(530 * time.Second), verify.KindExpired},       // exp + leeway
		{now.Add(530*time.Second - time.Nanosecond), 0},        // just inside
		{now.Add(70 * time.Second), 0},                         // iat - leeway exactly
		{now.Add(70*time.Second - time.Nanosecond), verify.KindIssuedInFuture},
	} {
		if _, err := cached.Verify(raw, valid); err != nil {
			t.Fatal(err)
		}
		_, err := cached.Verify(raw, tc.at)
		if tc.want == 0 {
			if err != nil {
				t.Errorf("at %v: %v", tc.at, err)
			}
			continue
		}
		wantKind(t, err, verify.PurposeEntitlement, tc.want)
	}
	// The expired hit dropped the entry: the next priming call missed.
	if s := cached.CacheStats(); s.Misses != 2 || s.Hits != 12 || s.Expirations != 1 {
		t.Errorf("stats = %+v, want 2 misses, 12 hits, 1 expiration", s)
	}
}

// TestTokenCacheFailuresNotCached: a failing token is fully verified on
// every call and never stored.
func TestTokenCacheFailuresNotCached(t *testing.T) {
	t.Parallel()
	dev := keys.Dev()
	good := mintEntitlement(t, baseClaims())
	badSig := []byte(string(good[:len(good)-2]) + map[bool]string{true: "AA", false: "AQ"}[string(good[len(good)-2:]) != "AA"])
	wrongKey, err := token.Mint(dev.Confirmation.Private, keys.EntitlementKeyID, "ES256", testTyp, baseClaims())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  []byte
		at   time.Time
		want verify.Kind
	}{
		{"bad signature", badSig, now, verify.KindSignature},
		{"wrong key", wrongKey, now, verify.KindSignature},
		{"wrong issuer", mintEntitlement(t, with(baseClaims(), "iss", "https://evil.test")), now, verify.KindIssuer},
		{"expired", good, now.Add(time.Hour), verify.KindExpired},
		{"not yet valid", mintEntitlement(t, with(baseClaims(), "nbf", now.Unix()+3600)), now, verify.KindNotYetValid},
		{"malformed", []byte("a.b"), now, verify.KindMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := cachedVerifier(t, 8)
			for i := range 3 {
				_, err := v.Verify(tc.raw, tc.at)
				wantKind(t, err, verify.PurposeEntitlement, tc.want)
				if s := v.CacheStats(); s.Hits != 0 || s.Misses != uint64(i+1) || s.Entries != 0 {
					t.Fatalf("call %d: stats = %+v, want every call a miss and nothing stored", i+1, s)
				}
			}
		})
	}
}

// TestTokenCacheOneByteChanged: every single-byte change of a cached token
// misses the cache and fails verification.
func TestTokenCacheOneByteChanged(t *testing.T) {
	t.Parallel()
	good := mintEntitlement(t, baseClaims())
	v := cachedVerifier(t, 8)
	if _, err := v.Verify(good, now); err != nil {
		t.Fatal(err)
	}
	step := 1
	if testing.Short() {
		step = 7
	}
	for i := 0; i < len(good); i += step {
		bad := append([]byte(nil), good...)
		// Another base64url character, so most changes reach the signature
		// check rather than the shape checks.
		if bad[i] == 'A' {
			bad[i] = 'B'
		} else if bad[i] == '.' {
			bad[i] = 'x'
		} else {
			bad[i] = 'A'
		}
		before := v.CacheStats()
		if c, err := v.Verify(bad, now); err == nil {
			t.Fatalf("byte %d changed: verified (%+v)", i, c)
		} else if _, ok := verify.KindOf(err); !ok {
			t.Fatalf("byte %d changed: %v is not a *verify.Error", i, err)
		}
		if s := v.CacheStats(); s.Hits != before.Hits || s.Misses != before.Misses+1 {
			t.Fatalf("byte %d changed: stats %+v → %+v, want a miss", i, before, s)
		}
	}
	// Appending or dropping a byte is a different key too.
	for _, bad := range [][]byte{append(append([]byte(nil), good...), 'A'), good[:len(good)-1]} {
		if _, err := v.Verify(bad, now); err == nil {
			t.Fatal("a token one byte longer or shorter verified")
		}
	}
	if s := v.CacheStats(); s.Hits != 0 || s.Entries != 1 {
		t.Fatalf("stats = %+v, want no hit and the good token alone stored", s)
	}
	if _, err := v.Verify(good, now); err != nil {
		t.Fatal(err)
	}
	if s := v.CacheStats(); s.Hits != 1 {
		t.Fatalf("the good token is no longer a hit: %+v", s)
	}
}

// TestTokenCacheBound: however many distinct tokens verify, the cache holds
// at most CacheEntries entries of at most 12 KiB each; the least recently
// used entry goes first.
func TestTokenCacheBound(t *testing.T) {
	t.Parallel()
	const size, distinct = 32, 400
	v := cachedVerifier(t, size)
	hot := mintEntitlement(t, with(baseClaims(), "jti", "hot"))
	for i := range distinct {
		raw := mintEntitlement(t, with(baseClaims(), "jti", fmt.Sprintf("jti-%d", i), "pad", strings.Repeat("p", i)))
		if _, err := v.Verify(raw, now); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(hot, now); err != nil {
			t.Fatal(err)
		}
		s := v.CacheStats()
		if s.Entries > size || s.Bytes > s.Entries*cacheBound || s.Bytes <= 0 {
			t.Fatalf("after %d tokens: %+v exceeds %d entries of %d bytes", i+1, s, size, cacheBound)
		}
	}
	s := v.CacheStats()
	if s.Entries != size || s.Evictions != distinct+1-size || s.Hits != distinct-1 {
		t.Fatalf("stats = %+v, want %d entries, %d evictions, %d hits (the hot token)", s, size, distinct+1-size, distinct-1)
	}
	t.Logf("%d entries, %d bytes estimated (%d per entry)", s.Entries, s.Bytes, s.Bytes/s.Entries)
}

// TestTokenCacheUncacheable: tokens over 4 KiB, and tokens whose decoded
// claims would exceed the entry bound, verify every time and are never
// stored.
func TestTokenCacheUncacheable(t *testing.T) {
	t.Parallel()
	// About 3 KiB of JSON that decodes into ~500 maps.
	many := make([]any, 500)
	for i := range many {
		many[i] = map[string]any{}
	}
	for _, tc := range []struct {
		name            string
		claims          map[string]any
		wantUncacheable uint64
	}{
		{"token over 4 KiB", with(baseClaims(), "pad", strings.Repeat("x", 5<<10)), 0},
		{"claims over the entry bound", with(baseClaims(), "pad", many), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := mintEntitlement(t, tc.claims)
			v := cachedVerifier(t, 8)
			for range 2 {
				if _, err := v.Verify(raw, now); err != nil {
					t.Fatal(err)
				}
			}
			if s := v.CacheStats(); s.Hits != 0 || s.Misses != 2 || s.Entries != 0 || s.Uncacheable != tc.wantUncacheable {
				t.Fatalf("token of %d bytes: stats = %+v", len(raw), s)
			}
		})
	}
}

// TestTokenCacheDropsExpired: entries are dropped once expired at a later
// call's now, on lookup and by the sweep.
func TestTokenCacheDropsExpired(t *testing.T) {
	t.Parallel()
	v := cachedVerifier(t, 64)
	var short [][]byte
	for i := range 10 {
		short = append(short, mintEntitlement(t, with(baseClaims(), "jti", fmt.Sprintf("short-%d", i), "exp", now.Unix()+60)))
	}
	long := mintEntitlement(t, with(baseClaims(), "jti", "long", "exp", now.Unix()+3600))
	for _, raw := range append(short, long) {
		if _, err := v.Verify(raw, now); err != nil {
			t.Fatal(err)
		}
	}
	if s := v.CacheStats(); s.Entries != 11 {
		t.Fatalf("entries = %d, want 11", s.Entries)
	}
	// Looked up after expiry: the expiry error, and the entry is gone.
	later := now.Add(10 * time.Minute)
	_, err := v.Verify(short[0], later)
	wantKind(t, err, verify.PurposeEntitlement, verify.KindExpired)
	// Hits on the long-lived token sweep the others out.
	for range 10 {
		if _, err := v.Verify(long, later); err != nil {
			t.Fatal(err)
		}
	}
	s := v.CacheStats()
	if s.Entries != 1 || s.Expirations != 10 {
		t.Fatalf("stats = %+v, want only the long-lived token left and 10 expirations", s)
	}
	// An expired token that is presented again is a miss and fails as fresh.
	_, err = v.Verify(short[1], later)
	wantKind(t, err, verify.PurposeEntitlement, verify.KindExpired)
	if got := v.CacheStats(); got.Misses != s.Misses+1 {
		t.Fatalf("stats = %+v, want a miss", got)
	}
}

// TestTokenCacheClaimsNotAliased: a caller that changes the returned claims
// (as a policy input builder or a log masker might) changes nothing for the
// next caller.
func TestTokenCacheClaimsNotAliased(t *testing.T) {
	t.Parallel()
	raw := mintEntitlement(t, with(baseClaims(), "aud", []any{"x", testAudience}, "list", []any{"a", map[string]any{"k": "v"}}))
	v := cachedVerifier(t, 8)
	want, err := newVerifier(t, verify.PurposeEntitlement, keys.Dev().Entitlement, testTyp, nil).Verify(raw, now)
	if err != nil {
		t.Fatal(err)
	}
	vandalize := func(c *verify.Claims) {
		c.Audience[0] = "evil"
		c.JTI = "evil"
		c.Raw["booking_state"] = "revoked"
		delete(c.Raw, "iss")
		c.Raw["gpu"].(map[string]any)["nodes"] = int64(999)
		delete(c.Raw["term"].(map[string]any), "end")
		c.Raw["aud"].([]any)[1] = "evil"
		list := c.Raw["list"].([]any)
		list[0] = "evil"
		list[1].(map[string]any)["k"] = "evil"
	}
	for i := range 4 { // a miss, then hits
		got, err := v.Verify(raw, now)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d: claims = %+v, want %+v", i+1, got, want)
		}
		vandalize(got)
	}
	if s := v.CacheStats(); s.Hits != 3 {
		t.Fatalf("stats = %+v, want 3 hits", s)
	}
}

// TestTokenCacheConcurrent: many goroutines verifying, mutating results and
// evicting each other (run with -race).
func TestTokenCacheConcurrent(t *testing.T) {
	t.Parallel()
	const size = 4
	v := cachedVerifier(t, size)
	var toks [][]byte
	for i := range 8 {
		toks = append(toks, mintEntitlement(t, with(baseClaims(), "jti", fmt.Sprintf("jti-%d", i), "exp", now.Unix()+int64(60*(i+1)))))
	}
	bad := append([]byte(nil), toks[0]...)
	bad[len(bad)-1] = map[bool]byte{true: 'Q', false: 'A'}[bad[len(bad)-1] == 'A']
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 60 {
				raw := toks[(g+i)%len(toks)]
				at := now.Add(time.Duration((g*7+i)%400) * time.Second)
				c, err := v.Verify(raw, at)
				if err != nil {
					if k, _ := verify.KindOf(err); k != verify.KindExpired {
						t.Errorf("unexpected %v", err)
					}
				} else {
					if c.Raw["booking_state"] != "completed" || c.Raw["gpu"].(map[string]any)["nodes"] != int64(2) {
						t.Errorf("claims changed: %v", c.Raw)
					}
					c.Raw["booking_state"] = "revoked"
					c.Raw["gpu"].(map[string]any)["nodes"] = int64(0)
				}
				if i%10 == 0 {
					if _, err := v.Verify(bad, now); err == nil {
						t.Error("bad token verified")
					}
					_ = v.CacheStats()
				}
			}
		})
	}
	wg.Wait()
	if s := v.CacheStats(); s.Entries > size || s.Hits+s.Misses != 16*66 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestTokenCachePurposeSeparation: a token cached by one verifier is not a
// hit for another, and the other purpose's checks still refuse it (the
// caller verifier, which names no typ, on the entitlement's reserved typ).
func TestTokenCachePurposeSeparation(t *testing.T) {
	t.Parallel()
	dev := keys.Dev()
	ent := cachedVerifier(t, 8)
	caller := newVerifier(t, verify.PurposeCaller, dev.Caller, "", func(o *verify.TokenOptions) { o.CacheEntries = 8 })
	raw := mintEntitlement(t, baseClaims())
	if _, err := ent.Verify(raw, now); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := caller.Verify(raw, now)
		wantKind(t, err, verify.PurposeCaller, verify.KindHeader)
	}
	if s := caller.CacheStats(); s.Hits != 0 || s.Entries != 0 {
		t.Fatalf("caller stats = %+v", s)
	}
}

func TestCacheEntriesFor(t *testing.T) {
	t.Parallel()
	for p, want := range map[verify.Purpose]int{
		verify.PurposeCaller:       verify.DefaultCacheEntries,
		verify.PurposeDepositor:    verify.DefaultCacheEntries,
		verify.PurposeEntitlement:  verify.DefaultCacheEntries,
		verify.PurposeConfirmation: 0,
		verify.PurposeManifest:     0,
	} {
		if got := verify.CacheEntriesFor(p); got != want {
			t.Errorf("CacheEntriesFor(%s) = %d, want %d", p, got, want)
		}
	}
	// No cache: CacheStats is all zero.
	v := newVerifier(t, verify.PurposeEntitlement, keys.Dev().Entitlement, testTyp, nil)
	if _, err := v.Verify(mintEntitlement(t, baseClaims()), now); err != nil {
		t.Fatal(err)
	}
	if s := v.CacheStats(); s != (verify.CacheStats{}) {
		t.Fatalf("stats without a cache = %+v", s)
	}
}

// TestTokenCacheEntryCost: the estimate behind CacheStats.Bytes (and the
// documented bound) is at least what the cached entries keep on the heap,
// for the real entitlement shape and for shapes that maximise allocations
// per JSON byte.
func TestTokenCacheEntryCost(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	small := make([]any, 12)
	for i := range small {
		small[i] = map[string]any{"k": int64(1000 + i)}
	}
	nums := make([]any, 200)
	for i := range nums {
		nums[i] = int64(1000 + i)
	}
	strs := make([]any, 120)
	for i := range strs {
		strs[i] = "s"
	}
	for _, tc := range []struct {
		name  string
		extra map[string]any
	}{
		{"entitlement", nil},
		{"small maps", map[string]any{"pad": small}},
		{"numbers", map[string]any{"pad": nums}},
		{"short strings", map[string]any{"pad": strs}},
		{"wide object", func() map[string]any {
			m := map[string]any{}
			for i := range 60 {
				m[fmt.Sprintf("k%d", i)] = true
			}
			return m
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 200
			toks := make([][]byte, n)
			for i := range toks {
				c := with(baseClaims(), "jti", fmt.Sprintf("jti-%d", i))
				for k, x := range tc.extra {
					c[k] = x
				}
				toks[i] = mintEntitlement(t, c)
			}
			v := cachedVerifier(t, n)
			// Grow the index first, so the measurement is of the entries.
			for _, raw := range toks {
				if _, err := v.Verify(raw, now); err != nil {
					t.Fatal(err)
				}
			}
			v = cachedVerifier(t, n)
			heap0 := liveHeap()
			for _, raw := range toks {
				if _, err := v.Verify(raw, now); err != nil {
					t.Fatal(err)
				}
			}
			heap1 := liveHeap()
			s := v.CacheStats()
			runtime.KeepAlive(v)
			runtime.KeepAlive(toks)
			if s.Entries != n {
				t.Fatalf("stats = %+v", s)
			}
			perEntry := float64(heap1-heap0) / n
			est := float64(s.Bytes) / n
			t.Logf("token %d bytes: heap %.0f B/entry, estimate %.0f B/entry", len(toks[0]), perEntry, est)
			if perEntry > est {
				t.Errorf("live heap %.0f B/entry exceeds the estimate %.0f B/entry", perEntry, est)
			}
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
