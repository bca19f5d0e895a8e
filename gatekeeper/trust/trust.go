// Package trust turns the trust section of the configuration (docs/architecture.md §2) into
// verifiers: one per purpose, each with its own key set, issuer, audience and
// token type, so that no key can verify another purpose's token.
//
// Development mode uses the published keys under fixtures/keys; any other
// configuration that names one of them is refused at start-up.
package trust

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Development issuers and audiences. The ".invalid" TLD (RFC 2606) makes it
// plain that no real identity provider stands behind them.
const (
	DevCallerIssuer       = "https://idp.dev.itogate.invalid"
	DevDepositorIssuer    = "https://desk.dev.itogate.invalid/depositor"
	DevEntitlementIssuer  = "https://backend.dev.itogate.invalid"
	DevConfirmationIssuer = "https://desk.dev.itogate.invalid"
	DevEvalsIssuer        = "https://evals.dev.itogate.invalid"
	DevAudience           = "itogate"
	DevDepositAudience    = "itogate-deposit"
	DevRevokerIssuer      = "https://backend.dev.itogate.invalid/revoker"
	DevRevokeAudience     = "itogate-revoke"
	DevTicketIssuer       = "https://itogate.dev.itogate.invalid"
	DevSchedulerIssuer    = "https://scheduler.dev.itogate.invalid"
	DevSchedulerAudience  = "itogate-scheduler"
	DevEvalsAudience      = "itogate-evals"
)

// Set holds one verifier per purpose.
type Set struct {
	Callers    *verify.TokenVerifier
	Depositors *verify.TokenVerifier
	// Revokers is nil when trust.revokers is not configured.
	Revokers *verify.TokenVerifier
	// Schedulers is nil when trust.schedulers is not configured.
	Schedulers   *verify.TokenVerifier
	Entitlement  *verify.TokenVerifier
	Confirmation *verify.TokenVerifier
	// Evals verifies the eval authority's tokens; nil when trust.evals is
	// not configured (every eval report and ladder decision is then refused).
	Evals     *verify.TokenVerifier
	Manifests *verify.ManifestVerifier
	// Tickets signs admission tickets; nil when none are configured.
	Tickets *ticket.Signer

	// fingerprints of every configured public key → its purpose, so the
	// ticket key can be refused when another purpose uses it too.
	fingerprints map[string]string
	// keyIDs are the key ids trusted per purpose, for KeyIDs.
	keyIDs map[string][]string
}

// KeyIDs are the key ids each configured purpose trusts, by its name under
// trust: ("callers", "manifest_signers" …; "tickets": the signing key's id
// then the previous key set's), each list sorted but the tickets'. The key
// ids are public (JWKS "kid"); nothing secret is in them. A purpose not
// configured is absent.
func (s *Set) KeyIDs() map[string][]string {
	out := make(map[string][]string, len(s.keyIDs))
	for k, v := range s.keyIDs {
		out[k] = slices.Clone(v)
	}
	return out
}

// addKeyIDs records the ids of set's keys under purpose name.
func (s *Set) addKeyIDs(name string, set jwk.Set) {
	if s.keyIDs == nil {
		s.keyIDs = map[string][]string{}
	}
	for i := 0; i < set.Len(); i++ {
		k, _ := set.Key(i)
		kid, _ := k.KeyID()
		s.keyIDs[name] = append(s.keyIDs[name], kid)
	}
	slices.Sort(s.keyIDs[name])
}

// DevConfig returns the trust configuration of development mode.
func DevConfig() config.Trust {
	return config.Trust{
		Callers:      config.TokenTrust{Issuer: DevCallerIssuer, Audience: DevAudience},
		Depositors:   config.TokenTrust{Issuer: DevDepositorIssuer, Audience: DevDepositAudience},
		Revokers:     config.TokenTrust{Issuer: DevRevokerIssuer, Audience: DevRevokeAudience},
		Schedulers:   config.TokenTrust{Issuer: DevSchedulerIssuer, Audience: DevSchedulerAudience},
		Entitlement:  config.TokenTrust{Issuer: DevEntitlementIssuer, Audience: DevAudience, Type: config.TypeEntitlement},
		Confirmation: config.TokenTrust{Issuer: DevConfirmationIssuer, Audience: DevAudience, Type: config.TypeConfirmation},
		Evals:        config.TokenTrust{Issuer: DevEvalsIssuer, Audience: DevEvalsAudience, Type: config.TypeEvals},
	}
}

// yamlName is each purpose's key under trust: in the configuration, so
// errors name what the operator wrote.
var yamlName = map[verify.Purpose]string{
	verify.PurposeCaller: "callers", verify.PurposeDepositor: "depositors", verify.PurposeRevoker: "revokers", verify.PurposeScheduler: "schedulers",
	verify.PurposeEntitlement: "entitlement", verify.PurposeConfirmation: "confirmation",
	verify.PurposeEvals: "evals",
}

// Dev builds the development verifiers from the embedded development keys.
func Dev() (*Set, error) {
	d := keys.Dev()
	cfg := DevConfig()
	var s Set
	build := func(p verify.Purpose, t config.TokenTrust, k keys.Key) (*verify.TokenVerifier, error) {
		set, err := k.KeySet()
		if err != nil {
			return nil, err
		}
		s.addKeyIDs(yamlName[p], set)
		return verify.NewTokenVerifier(options(p, t, set))
	}
	var err error
	if s.Callers, err = build(verify.PurposeCaller, cfg.Callers, d.Caller); err != nil {
		return nil, err
	}
	if s.Depositors, err = build(verify.PurposeDepositor, cfg.Depositors, d.Depositor); err != nil {
		return nil, err
	}
	if s.Revokers, err = build(verify.PurposeRevoker, cfg.Revokers, d.Revoker); err != nil {
		return nil, err
	}
	if s.Schedulers, err = build(verify.PurposeScheduler, cfg.Schedulers, d.Scheduler); err != nil {
		return nil, err
	}
	if s.Entitlement, err = build(verify.PurposeEntitlement, cfg.Entitlement, d.Entitlement); err != nil {
		return nil, err
	}
	if s.Confirmation, err = build(verify.PurposeConfirmation, cfg.Confirmation, d.Confirmation); err != nil {
		return nil, err
	}
	if s.Evals, err = build(verify.PurposeEvals, cfg.Evals, d.Evals); err != nil {
		return nil, err
	}
	s.Manifests, err = verify.NewManifestVerifier([]verify.Signer{
		d.ManifestECDSA.Signer(), d.ManifestEd25519.Signer(),
	})
	if err != nil {
		return nil, err
	}
	s.Tickets, err = ticket.NewSigner(ticket.SignerOptions{
		Key: d.Ticket.Private, KeyID: d.Ticket.KeyID, Algorithm: d.Ticket.Algorithm, Issuer: DevTicketIssuer,
	})
	if err != nil {
		return nil, err
	}
	s.keyIDs["manifest_signers"] = []string{d.ManifestECDSA.KeyID, d.ManifestEd25519.KeyID}
	slices.Sort(s.keyIDs["manifest_signers"])
	s.keyIDs["tickets"] = []string{d.Ticket.KeyID}
	return &s, nil
}

// Load builds the whole key set of a configuration: the development keys
// in development mode; otherwise FromConfig and, with a tickets section,
// LoadTickets, every file read with read. The runtime calls it at start-up
// and on each reload (SIGHUP), with a safefile.Snapshot's ReadFile so that
// the files come from one version of a Kubernetes volume.
func Load(cfg config.Config, read config.ReadFunc) (*Set, error) {
	if cfg.Dev {
		return Dev()
	}
	ts, err := fromConfig(cfg.Trust, read)
	if err != nil {
		return nil, err
	}
	if cfg.Tickets != nil {
		if err := ts.loadTickets(*cfg.Tickets, read); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// FromConfig builds verifiers from a production configuration. It refuses
// every development key and any key shared between purposes. Key files are
// read with safefile.ReadMounted: regular files of at most
// verify.MaxKeyFileBytes, no symbolic link but within their own directory
// (a Kubernetes Secret volume).
func FromConfig(t config.Trust) (*Set, error) {
	return fromConfig(t, safefile.ReadMounted)
}

func fromConfig(t config.Trust, read config.ReadFunc) (*Set, error) {
	dev := keys.DevFingerprints()
	seen := map[string]string{} // fingerprint → purpose
	check := func(purpose, fp string) error {
		if dev[fp] {
			return fmt.Errorf("trust.%s: a development key (fixtures/keys) is configured; it is published and must never be trusted", purpose)
		}
		if other, ok := seen[fp]; ok && other != purpose {
			return fmt.Errorf("trust.%s: the same key is also configured for %s; purposes need separate keys", purpose, other)
		}
		seen[fp] = purpose
		return nil
	}
	var s Set
	build := func(p verify.Purpose, tt config.TokenTrust) (*verify.TokenVerifier, error) {
		name := yamlName[p]
		set, err := loadSet(tt, read)
		if err != nil {
			return nil, fmt.Errorf("trust.%s: %w", name, err)
		}
		s.addKeyIDs(name, set)
		for i := 0; i < set.Len(); i++ {
			k, _ := set.Key(i)
			fp, err := verify.FingerprintJWK(k)
			if err != nil {
				return nil, fmt.Errorf("trust.%s: %w", name, err)
			}
			if err := check(name, fp); err != nil {
				return nil, err
			}
		}
		return verify.NewTokenVerifier(options(p, tt, set))
	}
	var err error
	if s.Callers, err = build(verify.PurposeCaller, t.Callers); err != nil {
		return nil, err
	}
	if s.Depositors, err = build(verify.PurposeDepositor, t.Depositors); err != nil {
		return nil, err
	}
	if t.Revokers != (config.TokenTrust{}) {
		if s.Revokers, err = build(verify.PurposeRevoker, t.Revokers); err != nil {
			return nil, err
		}
	}
	if t.Schedulers.Configured() {
		if s.Schedulers, err = build(verify.PurposeScheduler, t.Schedulers); err != nil {
			return nil, err
		}
	}
	if s.Entitlement, err = build(verify.PurposeEntitlement, t.Entitlement); err != nil {
		return nil, err
	}
	if s.Confirmation, err = build(verify.PurposeConfirmation, t.Confirmation); err != nil {
		return nil, err
	}
	if t.Evals.Configured() {
		if s.Evals, err = build(verify.PurposeEvals, t.Evals); err != nil {
			return nil, err
		}
	}
	var signers []verify.Signer
	for _, mk := range t.ManifestSigners {
		raw, err := read(mk.PEMFile, verify.MaxKeyFileBytes)
		if err != nil {
			return nil, fmt.Errorf("trust.manifest_signers[%s]: %w", mk.KeyID, err)
		}
		pub, err := verify.LoadPublicKeyPEM(raw)
		if err != nil {
			return nil, fmt.Errorf("trust.manifest_signers[%s]: %s: %w", mk.KeyID, mk.PEMFile, err)
		}
		if err := check("manifest_signers", verify.Fingerprint(pub)); err != nil {
			return nil, err
		}
		signers = append(signers, verify.Signer{KeyID: mk.KeyID, PublicKey: pub})
		if s.keyIDs == nil {
			s.keyIDs = map[string][]string{}
		}
		s.keyIDs["manifest_signers"] = append(s.keyIDs["manifest_signers"], mk.KeyID)
	}
	slices.Sort(s.keyIDs["manifest_signers"])
	if s.Manifests, err = verify.NewManifestVerifier(signers); err != nil {
		return nil, err
	}
	s.fingerprints = seen
	return &s, nil
}

// LoadTickets builds the ticket signer of a production configuration into
// s.Tickets. It refuses the development ticket key and a key that any other
// purpose also uses (a ticket key verifies nothing else, and nothing else's
// key signs tickets). Files are read as FromConfig reads them.
func (s *Set) LoadTickets(t config.Tickets) error {
	return s.loadTickets(t, safefile.ReadMounted)
}

func (s *Set) loadTickets(t config.Tickets, read config.ReadFunc) error {
	raw, err := read(t.SigningKey.PEMFile, verify.MaxKeyFileBytes)
	if err != nil {
		return fmt.Errorf("tickets.signing_key: %w", err)
	}
	priv, err := verify.LoadPrivateKeyPEM(raw)
	if err != nil {
		return fmt.Errorf("tickets.signing_key: %w", err)
	}
	fp := verify.Fingerprint(priv.Public())
	if keys.DevFingerprints()[fp] {
		return errors.New("tickets.signing_key: a development key (fixtures/keys) is configured; it is published and must never sign tickets")
	}
	if other, ok := s.fingerprints[fp]; ok {
		return fmt.Errorf("tickets.signing_key: the same key is also configured for %s; purposes need separate keys", other)
	}
	var previous jwk.Set
	if t.PreviousJWKSFile != "" {
		raw, err := read(t.PreviousJWKSFile, verify.MaxKeyFileBytes)
		if err != nil {
			return fmt.Errorf("tickets.previous_jwks_file: %w", err)
		}
		if previous, err = verify.LoadJWKS(raw); err != nil {
			return fmt.Errorf("tickets.previous_jwks_file: %w", err)
		}
	}
	s.Tickets, err = ticket.NewSigner(ticket.SignerOptions{
		Key: priv, KeyID: t.SigningKey.KeyID, Algorithm: t.SigningKey.Algorithm,
		Issuer: t.Issuer, Audience: t.Audience, Previous: previous,
	})
	if err != nil {
		return fmt.Errorf("tickets: %w", err)
	}
	if s.keyIDs == nil {
		s.keyIDs = map[string][]string{}
	}
	s.keyIDs["tickets"] = []string{t.SigningKey.KeyID}
	if previous != nil {
		for i := 0; i < previous.Len(); i++ {
			k, _ := previous.Key(i)
			kid, _ := k.KeyID()
			s.keyIDs["tickets"] = append(s.keyIDs["tickets"], kid)
		}
	}
	return nil
}

func options(p verify.Purpose, t config.TokenTrust, set jwk.Set) verify.TokenOptions {
	return verify.TokenOptions{
		Purpose:    p,
		Issuer:     t.Issuer,
		Audience:   t.Audience,
		Type:       t.Type,
		Keys:       set,
		Leeway:     time.Duration(t.Leeway),
		RequireJTI: p == verify.PurposeEntitlement || p == verify.PurposeConfirmation || p == verify.PurposeEvals,
		// Caller, depositor and entitlement tokens repeat until they expire;
		// confirmations are single-use and never cached.
		CacheEntries: verify.CacheEntriesFor(p),
	}
}

func loadSet(t config.TokenTrust, read config.ReadFunc) (jwk.Set, error) {
	if t.JWKSFile != "" {
		raw, err := read(t.JWKSFile, verify.MaxKeyFileBytes)
		if err != nil {
			return nil, err
		}
		return verify.LoadJWKS(raw)
	}
	if t.PEMFile == "" {
		return nil, errors.New("no key file")
	}
	raw, err := read(t.PEMFile, verify.MaxKeyFileBytes)
	if err != nil {
		return nil, err
	}
	return verify.KeySetFromPEM(t.KeyID, t.Algorithm, raw)
}
