// Package bundle loads signed OPA policy bundles and keeps the active one
// (docs/architecture.md §4, bundles/README.md).
//
// A Source produces verified bundles: the one embedded in the binary
// (development, unsigned), a file, or a bundle server speaking the OPA bundle
// protocol (GET with If-None-Match; 200 with an ETag, or 304). A Verifier
// checks an archive before anything of it is used: its size, every tar entry
// (regular files with clean relative names only), the signature in
// .signatures.json against the configured keys (OPA's own verification, which
// catches a file added, removed or changed), then the .manifest: revision,
// signed build time, roots. A Manager activates a verified bundle into a new
// policy.Engine and swaps an atomic pointer, refusing rollbacks and bundles
// past their maximum age; the last good bundle stays active whatever fails.
//
// Revisions are ordered by a timestamp prefix (see ParseRevision), the age
// of a bundle is the time since the built_at instant in its signed .manifest
// metadata, never since it was downloaded.
package bundle

import (
	"fmt"
	"time"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
)

// Bundle is a verified bundle, ready to activate.
type Bundle struct {
	// Parsed is the bundle as OPA read it. Activation hands it to a
	// policy.Engine, which takes it over.
	Parsed *opabundle.Bundle
	// Revision is the .manifest revision (a digest prefix for the embedded
	// bundle, which has none).
	Revision string
	// Digest is "sha256:<hex>" of the archive bytes, as `sha256sum` prints
	// it (for the embedded bundle: policy.DigestFS over its files).
	Digest string
	// RevisionTime orders revisions (the revision's timestamp prefix); zero
	// for the embedded bundle.
	RevisionTime time.Time
	// BuiltAt is the signed metadata.built_at; the bundle's age counts from
	// it. Zero for the embedded bundle.
	BuiltAt time.Time
	// KeyID names the key that verified the signature; empty when unsigned.
	KeyID string
	// Origin is where it came from: "embedded", a file path or a URL.
	Origin string
	// Size is the archive size in bytes (0 for the embedded bundle).
	Size int
}

// Signed reports whether a signature was verified.
func (b *Bundle) Signed() bool { return b.KeyID != "" }

// Reason classifies why a bundle was not activated. Reasons are the values
// of the reason label of itogate_bundle_activations_total.
type Reason string

// Reasons a bundle is not activated.
const (
	ReasonFetch          Reason = "fetch"           // could not be read or downloaded
	ReasonTooLarge       Reason = "too_large"       // archive, a file or the unpacked total over its limit
	ReasonArchive        Reason = "archive"         // not a gzip'd tar of regular files we expect
	ReasonPath           Reason = "path"            // an entry escapes the bundle root, or is a link
	ReasonUnsigned       Reason = "unsigned"        // no .signatures.json although keys are configured
	ReasonSignature      Reason = "signature"       // signature, key or file list/hashes do not verify
	ReasonInvalid        Reason = "invalid"         // OPA cannot read it (Rego or data does not parse)
	ReasonManifest       Reason = "manifest"        // revision, built_at, roots, rego version, entrypoint
	ReasonCompile        Reason = "compile"         // the policy does not compile
	ReasonFactsModel     Reason = "facts_model"     // written for another training-facts model (policy.ErrFactsModel)
	ReasonRollback       Reason = "rollback"        // revision not newer than the active one
	ReasonRevisionReused Reason = "revision_reused" // the active revision with different bytes
	ReasonStale          Reason = "stale"           // already older than the maximum age
	ReasonFuture         Reason = "future"          // built_at is in the future
)

// Reasons lists every Reason, in the order above: the metric's series are
// created from it at start-up, so an alert on the first failure fires.
func Reasons() []Reason {
	return []Reason{ReasonFetch, ReasonTooLarge, ReasonArchive, ReasonPath, ReasonUnsigned, ReasonSignature,
		ReasonInvalid, ReasonManifest, ReasonCompile, ReasonFactsModel, ReasonRollback, ReasonRevisionReused,
		ReasonStale, ReasonFuture}
}

// Error is a bundle that was not activated. Err's text never holds key
// material, only names, digests and revisions.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return "bundle: " + string(e.Reason) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, args...)}
}
