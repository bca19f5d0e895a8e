package bundle

import (
	"fmt"
	"io/fs"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// FromConfig turns the policy section into Manager options (Source, MaxAge,
// PollInterval, Deadline; the caller adds Logger and Observer). Keys left
// unset stay zero and take the defaults of NewManager, NewHTTP and
// NewVerifier, except the poll interval of development mode
// (DevPollInterval).
//
// Without a bundle section the source is the embedded tree. With one, the
// verification keys are read from their PEM files; development mode may
// omit them and then trusts the published development bundle key, and any
// other mode refuses that key (and every development key).
func FromConfig(p config.Policy, embedded fs.FS, dev bool) (Options, error) {
	opts := Options{Deadline: time.Duration(p.Deadline)}
	c := p.Bundle
	if c == nil {
		opts.Source = NewEmbedded(embedded)
		return opts, nil
	}
	ks, err := loadKeys(c.VerificationKeys, dev)
	if err != nil {
		return Options{}, err
	}
	v, err := NewVerifier(VerifierOptions{Keys: ks, Scope: c.Scope, MaxBytes: c.MaxBytes})
	if err != nil {
		return Options{}, fmt.Errorf("policy.bundle: %w", err)
	}
	if c.File != "" {
		opts.Source = NewFile(c.File, v)
	} else {
		h, err := NewHTTP(HTTPOptions{URL: c.URL, Verifier: v, Timeout: time.Duration(c.Timeout)})
		if err != nil {
			return Options{}, fmt.Errorf("policy.bundle: %w", err)
		}
		opts.Source = h
	}
	opts.MaxAge = time.Duration(c.MaxAge)
	opts.PollInterval = time.Duration(c.PollInterval)
	if opts.PollInterval == 0 && dev {
		opts.PollInterval = DevPollInterval
	}
	return opts, nil
}

// DevKey is the published development bundle key (fixtures/keys), trusted
// only in development mode.
func DevKey() Key {
	k := keys.Dev().Bundle
	return Key{ID: k.KeyID, Algorithm: k.Algorithm, PEM: k.PublicPEM}
}

func loadKeys(specs []config.BundleKey, dev bool) ([]Key, error) {
	if len(specs) == 0 && dev {
		return []Key{DevKey()}, nil
	}
	devFingerprints := keys.DevFingerprints()
	out := make([]Key, 0, len(specs))
	for _, s := range specs {
		pem, err := readKeyFile(s.PEMFile)
		if err != nil {
			return nil, fmt.Errorf("policy.bundle.verification_keys[%s]: %w", s.KeyID, err)
		}
		k := Key{ID: s.KeyID, Algorithm: s.Algorithm, PEM: pem}
		if !dev && devFingerprints[k.Fingerprint()] {
			return nil, fmt.Errorf("policy.bundle.verification_keys[%s]: a development key (fixtures/keys) is configured; "+
				"it is published and must never be trusted", s.KeyID)
		}
		out = append(out, k)
	}
	return out, nil
}

// readKeyFile reads a verification key with safefile.ReadMounted (at most
// verify.MaxKeyFileBytes; symbolic links only within its own directory, as
// in a Kubernetes Secret volume).
func readKeyFile(path string) ([]byte, error) {
	return safefile.ReadMounted(path, verify.MaxKeyFileBytes)
}
