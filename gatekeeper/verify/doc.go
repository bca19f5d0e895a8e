// Package verify establishes the cryptographic facts of an admission
// (docs/architecture.md §2): it verifies JWTs of one purpose each (caller, depositor,
// entitlement, confirmation, and the admission tickets itogate signs itself)
// with jwx, and detached manifest signatures in
// the format of `cosign sign-blob --key` with sigstore's verifiers.
//
// Trust is configuration only. The algorithm of a token comes from its
// configured key, never from the token; alg "none", HMAC, embedded or
// remote keys (jwk, jku, x5u, x5c), crit, JSON-serialized JWS and JWE are
// refused; nothing is ever fetched. Time is always passed in. A
// TokenVerifier may remember successful verifications by the SHA-256 of the
// token bytes (TokenOptions.CacheEntries), re-checking time on each use.
//
// Every verification failure is an *Error carrying the Purpose and a Kind,
// so the server maps (purpose, kind) to a stable deny code in one place.
// Error messages never contain token, signature or key bytes.
//
// It is also the one home of key parsing: public keys (PEM, JWKS) for every
// verifier, and PKCS#8 private keys (LoadPrivateKeyPEM) for the ticket key
// itogate signs with and for the development tooling.
package verify
