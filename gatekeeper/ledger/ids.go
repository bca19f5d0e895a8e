package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

const (
	confirmationRefPrefix = "cfr_"
	runIDPrefix           = "run_"
	// runIDChars is the length of a run id after its prefix: 128 bits in
	// 5-bit groups, the ULID text form.
	runIDChars = 26
)

// crockford is Crockford's base32 alphabet in lower case (no i, l, o, u), as
// ULIDs use it: ids survive being read aloud or retyped from a log.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// NewConfirmationRef returns a fresh confirmation reference: "cfr_" followed
// by 32 lowercase hex digits encoding 128 bits from crypto/rand. The
// reference is opaque and authorizes nothing by itself (docs/architecture.md §1).
func NewConfirmationRef() string {
	var b [16]byte
	// crypto/rand.Read never returns an error; it crashes the program
	// instead, which is the right outcome for an id generator.
	_, _ = rand.Read(b[:])
	return confirmationRefPrefix + hex.EncodeToString(b[:])
}

// IsConfirmationRef reports whether s has the shape NewConfirmationRef
// produces. It says nothing about whether s was ever deposited.
func IsConfirmationRef(s string) bool {
	hexPart, ok := strings.CutPrefix(s, confirmationRefPrefix)
	if !ok || len(hexPart) != 32 {
		return false
	}
	for i := range len(hexPart) {
		c := hexPart[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewRunID returns a fresh run id: "run_" followed by 26 characters of
// lowercase Crockford base32 encoding a ULID (48-bit Unix milliseconds, then
// 80 bits from crypto/rand). Ids sort by creation time, which operators
// reading logs and listings want, and collide with probability 2^-80 within
// one millisecond.
func NewRunID() string {
	return newRunID(time.Now())
}

func newRunID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return runIDPrefix + encodeULID(b)
}

// encodeULID writes 128 bits as 26 base32 digits, most significant first;
// the first digit carries only 3 bits, so it is at most '7'.
func encodeULID(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [runIDChars]byte
	for i := runIDChars - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// IsRunID reports whether s has the shape NewRunID produces.
func IsRunID(s string) bool {
	body, ok := strings.CutPrefix(s, runIDPrefix)
	if !ok || len(body) != runIDChars || body[0] > '7' {
		return false
	}
	for i := range len(body) {
		if strings.IndexByte(crockford, body[i]) < 0 {
			return false
		}
	}
	return true
}
