package verify

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/itocompute/itogate/internal/jsonvalue"
)

// DefaultCacheEntries is the recommended TokenOptions.CacheEntries for the
// purposes whose tokens repeat (see CacheEntriesFor).
const DefaultCacheEntries = 1024

// Bounds of one cache entry. A successful verification of a longer token, or
// one whose decoded claims are estimated above cacheMaxEntryBytes, is not
// stored: such a token is fully verified every time.
const (
	// cacheMaxTokenBytes is the largest token the cache stores: 4 KiB, a
	// quarter of DefaultMaxTokenBytes (real caller and entitlement tokens
	// are under 1 KiB).
	cacheMaxTokenBytes = 4 << 10
	// cacheMaxEntryBytes bounds the estimated memory of one entry (the
	// entry, its index slot and the decoded claims; see entryCost): 12 KiB.
	cacheMaxEntryBytes = 12 << 10
)

// CacheEntriesFor is the recommended TokenOptions.CacheEntries of a purpose:
// DefaultCacheEntries for caller, depositor, revoker, scheduler, entitlement
// and ticket tokens, which their holders present again and again until they
// expire (every Pod of a workload carries the same ticket), and 0 (no cache)
// for confirmation tokens, which are single-use, and anything else.
func CacheEntriesFor(p Purpose) int {
	switch p {
	case PurposeCaller, PurposeDepositor, PurposeRevoker, PurposeScheduler, PurposeEntitlement, PurposeTicket:
		return DefaultCacheEntries
	}
	return 0
}

// CacheStats are the counters of a TokenVerifier's cache since the verifier
// was built. Every field is zero for a verifier without a cache.
type CacheStats struct {
	// Hits counts Verify calls answered from the cache: only the checks that
	// depend on now ran (their failures, e.g. an expired token, count here
	// too).
	Hits uint64
	// Misses counts Verify calls that ran the full verification, whatever
	// its outcome.
	Misses uint64
	// Uncacheable counts successful verifications not stored because the
	// token or its decoded claims exceed the per-entry bound.
	Uncacheable uint64
	// Evictions counts entries dropped, least recently used first, to make
	// room for a new one.
	Evictions uint64
	// Expirations counts entries dropped because their token had expired
	// (exp + leeway; exp with StrictExpiry) at the now of a later Verify call.
	Expirations uint64
	// Entries is the number of entries now; at most the configured
	// TokenOptions.CacheEntries.
	Entries int
	// Bytes is the estimated memory of those entries (see
	// TokenVerifier); at most Entries × 12 KiB.
	Bytes int
}

// Caching reports whether the verifier has a cache (TokenOptions.CacheEntries > 0).
func (v *TokenVerifier) Caching() bool { return v.cache != nil }

// CacheStats returns the verifier's cache counters (all zero without a
// cache). It is safe to call concurrently with Verify.
func (v *TokenVerifier) CacheStats() CacheStats {
	if v.cache == nil {
		return CacheStats{}
	}
	return v.cache.stats()
}

// tokenCache remembers successful verifications of one TokenVerifier.
//
// It is a map from the SHA-256 of the token bytes to an entry, plus a doubly
// linked list of the entries in recency order (head.next most recently used,
// head.prev least). One mutex guards both and is held only for O(1) work:
// a map access, a few pointer swaps and at most sweepSteps expiry checks.
// Claims are cloned outside the lock.
//
// Expired entries are dropped when looked up, and by a sweep hand that walks
// the list from its least recently used end, examining sweepSteps entries per
// call, so every entry is examined within a bounded number of calls.
type tokenCache struct {
	mu    sync.Mutex
	max   int
	index map[[sha256.Size]byte]*cacheEntry
	head  cacheEntry  // sentinel of the recency list
	hand  *cacheEntry // next entry the sweep examines; &head: restart at the LRU end
	bytes int

	hits, misses, uncacheable, evictions, expirations uint64
}

// sweepSteps is how many entries each cache call examines for expiry.
const sweepSteps = 2

type cacheEntry struct {
	key [sha256.Size]byte
	// claims are never changed after put and never handed out: each hit
	// returns a clone.
	claims *Claims
	// deadline is exp + leeway (exp alone with StrictExpiry): at or after
	// it the token is expired.
	deadline   time.Time
	cost       int
	prev, next *cacheEntry
}

func newTokenCache(max int) *tokenCache {
	c := &tokenCache{max: max, index: make(map[[sha256.Size]byte]*cacheEntry)}
	c.head.next, c.head.prev = &c.head, &c.head
	c.hand = &c.head
	return c
}

// get returns the claims stored under key, which the caller must not change.
// An entry already expired at now is dropped, but its claims are still
// returned so that the caller's time checks produce the expiry error.
func (c *tokenCache) get(key *[sha256.Size]byte, now time.Time) (*Claims, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.index[*key]
	if !ok {
		c.misses++
		c.sweep(now)
		return nil, false
	}
	c.hits++
	if !now.Before(e.deadline) {
		c.remove(e)
		c.expirations++
	} else if c.head.next != e {
		c.unlink(e)
		c.pushFront(e)
	}
	c.sweep(now)
	return e.claims, true
}

// miss counts a full verification that did not consult the cache.
func (c *tokenCache) miss() {
	c.mu.Lock()
	c.misses++
	c.mu.Unlock()
}

// put stores claims, which the cache owns from now on, under key.
func (c *tokenCache) put(key *[sha256.Size]byte, claims *Claims, deadline, now time.Time) {
	cost := entryCost(claims)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cost > cacheMaxEntryBytes {
		c.uncacheable++
		return
	}
	if _, ok := c.index[*key]; ok { // a concurrent miss stored it first
		return
	}
	for len(c.index) >= c.max {
		c.remove(c.head.prev)
		c.evictions++
	}
	e := &cacheEntry{key: *key, claims: claims, deadline: deadline, cost: cost}
	c.index[e.key] = e
	c.bytes += cost
	c.pushFront(e)
	c.sweep(now)
}

// sweep examines up to sweepSteps entries at the hand and drops those
// expired at now.
func (c *tokenCache) sweep(now time.Time) {
	for range sweepSteps {
		if len(c.index) == 0 {
			return
		}
		if c.hand == &c.head {
			c.hand = c.head.prev
		}
		e := c.hand
		c.hand = e.prev
		if !now.Before(e.deadline) {
			c.remove(e)
			c.expirations++
		}
	}
}

func (c *tokenCache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

// unlink takes e out of the list, moving the sweep hand past it.
func (c *tokenCache) unlink(e *cacheEntry) {
	if c.hand == e {
		c.hand = e.prev
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (c *tokenCache) remove(e *cacheEntry) {
	c.unlink(e)
	delete(c.index, e.key)
	c.bytes -= e.cost
}

func (c *tokenCache) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{
		Hits: c.hits, Misses: c.misses, Uncacheable: c.uncacheable,
		Evictions: c.evictions, Expirations: c.expirations,
		Entries: len(c.index), Bytes: c.bytes,
	}
}

// clone returns a deep copy of c: Audience and every map and slice in Raw
// are new, so nothing the caller changes reaches c. Strings, which are
// immutable, are shared.
func (c *Claims) clone() *Claims {
	out := *c
	out.Audience = append([]string(nil), c.Audience...)
	out.Raw = jsonvalue.Clone(c.Raw).(map[string]any)
	return &out
}

// Memory estimates used by entryCost, in bytes, chosen to be at or above
// what the Go runtime allocates (size classes included): TestTokenCacheEntryCost
// compares them with the live heap.
const (
	// entryOverhead: the cacheEntry, its index slot, the Claims struct and
	// slack for the map's growth.
	entryOverhead = 512
	// mapOverhead and mapSlot: a map[string]any header with its first
	// group of eight slots (a one-member map takes ~400 bytes) and, per
	// member, a 16-byte key + 16-byte value slot at the worst load factor,
	// doubled for growth.
	mapOverhead = 352
	mapSlot     = 96
	// sliceOverhead and sliceSlot: a boxed []any header and one element.
	sliceOverhead = 32
	sliceSlot     = 16
	// boxed: an int64, float64 or string header stored in an interface.
	boxed = 16
)

// entryCost estimates the memory one cache entry retains: a fixed overhead,
// the Audience slice and the decoded claims (every string's bytes, map
// member, slice element and boxed number). KeyID, JTI, Subject, Issuer and
// Audience share their bytes with Raw or the key set.
func entryCost(c *Claims) int {
	return entryOverhead + sliceSlot*len(c.Audience) + valueCost(c.Raw)
}

func valueCost(v any) int {
	switch t := v.(type) {
	case map[string]any:
		n := mapOverhead
		for k, e := range t {
			n += mapSlot + roundUp(len(k)) + valueCost(e)
		}
		return n
	case []any:
		n := sliceOverhead
		for _, e := range t {
			n += sliceSlot + valueCost(e)
		}
		return n
	case string:
		return boxed + roundUp(len(t))
	case int64, float64:
		return boxed
	default: // bool, nil: no allocation
		return 0
	}
}

// roundUp is n rounded up to the allocator's size classes (≤ 12.5% above n,
// at least 8 bytes over small sizes).
func roundUp(n int) int {
	if n == 0 {
		return 0
	}
	return n + n/8 + 8
}
