// Package config loads itogate's YAML configuration.
//
// Like Prometheus' config package: a defaults struct, strict decoding
// (unknown keys are errors) and validation at load, so a typo never silently
// weakens the gate. Development mode (no file) is built by Dev and is the
// only mode that may use the published keys under fixtures/keys.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole service configuration.
type Config struct {
	// Listen is host:port. Development mode only accepts loopback.
	Listen string `yaml:"listen"`
	// DataDir holds the bbolt ledger unless Ledger.Path says otherwise.
	DataDir string `yaml:"data_dir"`
	Ledger  Ledger `yaml:"ledger"`
	Trust   Trust  `yaml:"trust"`
	Policy  Policy `yaml:"policy"`
	Limits  Limits `yaml:"limits"`
	// DecisionLog is where one JSON line per admission goes: "stdout", a
	// file path (appended, mode 0600), or "off". Default: <data_dir>/decisions.jsonl.
	DecisionLog string `yaml:"decision_log"`
	// Dev marks development mode; it is never read from a file.
	Dev bool `yaml:"-"`
}

// Ledger selects the store.
type Ledger struct {
	// Driver is "bbolt" (the only one so far).
	Driver string `yaml:"driver"`
	// Path of the bbolt file; default <data_dir>/ledger.db.
	Path string `yaml:"path"`
}

// Trust holds the key sets of design §2; none may stand in for another.
type Trust struct {
	Callers         TokenTrust    `yaml:"callers"`
	Depositors      TokenTrust    `yaml:"depositors"`
	Entitlement     TokenTrust    `yaml:"entitlement"`
	Confirmation    TokenTrust    `yaml:"confirmation"`
	ManifestSigners []ManifestKey `yaml:"manifest_signers"`
}

// TokenTrust is one JWT purpose: who issues it, for whom, and the public keys
// that verify it (a JWKS file, or one PEM file with its key id and algorithm).
type TokenTrust struct {
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// Type is the required JOSE "typ" header; empty skips the check (some
	// identity providers send none).
	Type      string   `yaml:"type"`
	JWKSFile  string   `yaml:"jwks_file"`
	PEMFile   string   `yaml:"pem_file"`
	KeyID     string   `yaml:"key_id"`
	Algorithm string   `yaml:"algorithm"`
	Leeway    Duration `yaml:"leeway"`
}

// ManifestKey pins one manifest signer's public key (PEM, ECDSA P-256 or
// Ed25519), as `cosign sign-blob --key` users configure cosign.pub.
type ManifestKey struct {
	KeyID   string `yaml:"key_id"`
	PEMFile string `yaml:"pem_file"`
}

// Policy selects the bundle.
type Policy struct {
	// BundleDir is a directory holding the bundle root; empty means the
	// bundle embedded in the binary.
	BundleDir string `yaml:"bundle_dir"`
	// Deadline bounds one evaluation (default 250ms).
	Deadline Duration `yaml:"deadline"`
}

// Limits bound request handling.
type Limits struct {
	// MaxBodyBytes bounds a request body (default 2 MiB: a 1 MiB manifest
	// base64-encoded plus tokens).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RequestTimeout bounds a whole request (default 5s).
	RequestTimeout Duration `yaml:"request_timeout"`
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// Standard audiences and token types of each purpose; configs may override
// issuer and audience but keep purposes apart.
const (
	DefaultLeeway       = 30 * time.Second
	MaxLeeway           = 5 * time.Minute
	TypeEntitlement     = "ito-entitlement+jwt"
	TypeConfirmation    = "ito-confirmation+jwt"
	defaultMaxBody      = 2 << 20
	defaultReqTimeout   = 5 * time.Second
	defaultEvalDeadline = 250 * time.Millisecond
)

func defaults() Config {
	return Config{
		Listen:  "127.0.0.1:8443",
		DataDir: "./data",
		Ledger:  Ledger{Driver: "bbolt"},
		Policy:  Policy{Deadline: Duration(defaultEvalDeadline)},
		Limits: Limits{
			MaxBodyBytes:   defaultMaxBody,
			RequestTimeout: Duration(defaultReqTimeout),
		},
	}
}

// Load reads a YAML file strictly and validates it.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c := defaults()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("config: %s: %w", path, err)
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c.resolvePaths(base)
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %s: %w", path, err)
	}
	return c, nil
}

// Dev returns the development configuration: loopback listener, ledger under
// dataDir, trust filled in by the caller from the development keys.
func Dev(listen, dataDir string) Config {
	c := defaults()
	c.Dev = true
	if listen != "" {
		c.Listen = listen
	}
	if dataDir != "" {
		c.DataDir = dataDir
	}
	return c
}

// DecisionLogPath is the decision log destination: "stdout", "off" or a file.
func (c Config) DecisionLogPath() string {
	if c.DecisionLog != "" {
		return c.DecisionLog
	}
	return filepath.Join(c.DataDir, "decisions.jsonl")
}

// LedgerPath is the bbolt file path.
func (c Config) LedgerPath() string {
	if c.Ledger.Path != "" {
		return c.Ledger.Path
	}
	return filepath.Join(c.DataDir, "ledger.db")
}

// LoopbackOnly reports an error unless Listen is a loopback address.
func (c Config) LoopbackOnly() error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("listen %q: %w", c.Listen, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("development mode listens on loopback only, not %q", c.Listen)
	}
	return nil
}

// Validate checks the whole configuration. It does not read key files; the
// trust package does, and refuses development keys outside development mode.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %w", err))
	}
	if c.Ledger.Driver != "bbolt" {
		errs = append(errs, fmt.Errorf("ledger.driver: %q is not supported (bbolt)", c.Ledger.Driver))
	}
	for name, t := range map[string]TokenTrust{
		"callers": c.Trust.Callers, "depositors": c.Trust.Depositors,
		"entitlement": c.Trust.Entitlement, "confirmation": c.Trust.Confirmation,
	} {
		if err := t.validate(); err != nil {
			errs = append(errs, fmt.Errorf("trust.%s: %w", name, err))
		}
	}
	if c.Trust.Entitlement.Type == "" || c.Trust.Confirmation.Type == "" {
		errs = append(errs, errors.New("trust.entitlement.type and trust.confirmation.type are required"))
	}
	if c.Trust.Entitlement.Type == c.Trust.Confirmation.Type {
		errs = append(errs, errors.New("trust: entitlement and confirmation must use different token types"))
	}
	if len(c.Trust.ManifestSigners) == 0 {
		errs = append(errs, errors.New("trust.manifest_signers: at least one key"))
	}
	for i, k := range c.Trust.ManifestSigners {
		if k.KeyID == "" || k.PEMFile == "" {
			errs = append(errs, fmt.Errorf("trust.manifest_signers[%d]: key_id and pem_file are required", i))
		}
	}
	if c.Policy.Deadline <= 0 {
		errs = append(errs, errors.New("policy.deadline must be positive"))
	}
	if c.Limits.MaxBodyBytes <= 0 || c.Limits.MaxBodyBytes > 16<<20 {
		errs = append(errs, errors.New("limits.max_body_bytes must be in (0, 16 MiB]"))
	}
	if c.Limits.RequestTimeout <= 0 {
		errs = append(errs, errors.New("limits.request_timeout must be positive"))
	}
	return errors.Join(errs...)
}

func (t TokenTrust) validate() error {
	var errs []error
	if t.Issuer == "" || t.Audience == "" {
		errs = append(errs, errors.New("issuer and audience are required"))
	}
	switch {
	case t.JWKSFile != "" && t.PEMFile != "":
		errs = append(errs, errors.New("give jwks_file or pem_file, not both"))
	case t.JWKSFile == "" && t.PEMFile == "":
		errs = append(errs, errors.New("jwks_file or pem_file is required"))
	case t.PEMFile != "" && (t.KeyID == "" || t.Algorithm == ""):
		errs = append(errs, errors.New("pem_file needs key_id and algorithm"))
	}
	if t.Leeway < 0 {
		errs = append(errs, errors.New("leeway must not be negative"))
	}
	if time.Duration(t.Leeway) > MaxLeeway {
		errs = append(errs, fmt.Errorf("leeway above %s", MaxLeeway))
	}
	return errors.Join(errs...)
}

// EffectiveLeeway is the configured leeway or DefaultLeeway.
func (t TokenTrust) EffectiveLeeway() time.Duration {
	if t.Leeway == 0 {
		return DefaultLeeway
	}
	return time.Duration(t.Leeway)
}

func (c *Config) resolvePaths(base string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	abs(&c.DataDir)
	if c.DecisionLog != "stdout" && c.DecisionLog != "off" {
		abs(&c.DecisionLog)
	}
	abs(&c.Ledger.Path)
	abs(&c.Policy.BundleDir)
	for _, t := range []*TokenTrust{&c.Trust.Callers, &c.Trust.Depositors, &c.Trust.Entitlement, &c.Trust.Confirmation} {
		abs(&t.JWKSFile)
		abs(&t.PEMFile)
	}
	for i := range c.Trust.ManifestSigners {
		abs(&c.Trust.ManifestSigners[i].PEMFile)
	}
}
