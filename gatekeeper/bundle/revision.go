package bundle

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// RevisionLayout is the timestamp every revision starts with: UTC, to the
// second, ISO 8601 basic format ("20261129T120000Z").
const RevisionLayout = "20060102T150405Z"

// reRevision is a timestamp and an optional label ("-" then letters, digits,
// ".", "_", "+", "-"; `git describe --always --dirty` fits).
var reRevision = regexp.MustCompile(`^([0-9]{8}T[0-9]{6}Z)(-[0-9A-Za-z][0-9A-Za-z._+-]{0,99})?$`)

// ParseRevision returns the instant that orders a revision.
//
// A revision is "<YYYYMMDDTHHMMSSZ>[-<label>]", e.g.
// "20261129T120000Z-v0.3.0-4-gabc1234". Revisions are ordered by the
// timestamp only; a bundle is activated only if its timestamp is strictly
// later than the active bundle's (the very same bytes again are a no-op).
// `make bundle` writes the build time there; any monotonically increasing
// timestamp chosen by the release process works.
func ParseRevision(rev string) (time.Time, error) {
	m := reRevision.FindStringSubmatch(rev)
	if m == nil {
		return time.Time{}, fmt.Errorf("revision %q is not <YYYYMMDDTHHMMSSZ>[-label]", truncate(rev, 64))
	}
	t, err := time.Parse(RevisionLayout, m[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("revision %q: %w", truncate(rev, 64), err)
	}
	return t, nil
}

// parseBuiltAt reads metadata.built_at, an RFC 3339 timestamp.
func parseBuiltAt(metadata map[string]any) (time.Time, error) {
	v, ok := metadata["built_at"]
	if !ok {
		return time.Time{}, errors.New("metadata.built_at is missing (an RFC 3339 timestamp, signed with the bundle)")
	}
	s, ok := v.(string)
	if !ok {
		return time.Time{}, errors.New("metadata.built_at is not a string")
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("metadata.built_at %q is not RFC 3339", truncate(s, 64))
	}
	return t.UTC(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
