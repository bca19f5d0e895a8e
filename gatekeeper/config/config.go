// Package config loads itogate's YAML configuration.
//
// Like Prometheus' config package: a few configuration-level defaults,
// strict decoding (unknown keys are errors) and validation at load, so a
// typo never silently weakens the gate. A key left unset takes the default
// of the component it configures, applied in that component's own options
// (Cerbos' SetDefaults): one home per default. Development mode (no file)
// is built by Dev and is the only mode that may use the published keys
// under fixtures/keys. Set (the --set flag) assigns one dotted key with the
// file's strict decoding, in either mode.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/ticket"
)

// Config is the whole service configuration.
type Config struct {
	// Listen is host:port. Development mode only accepts loopback.
	Listen string `yaml:"listen"`
	// TLS, when set, makes the API listener serve HTTPS with this pair
	// (inside a cluster; see docs/kubernetes.md); nil serves plain HTTP.
	TLS *ListenerTLS `yaml:"tls"`
	// DataDir holds the bbolt ledger unless Ledger.Path says otherwise.
	DataDir string `yaml:"data_dir"`
	Ledger  Ledger `yaml:"ledger"`
	Trust   Trust  `yaml:"trust"`
	Policy  Policy `yaml:"policy"`
	Limits  Limits `yaml:"limits"`
	// Tickets configures the admission tickets itogate signs on an allowed
	// train.create (docs/tickets.md). Without it allows carry no ticket and
	// the workload webhook cannot run.
	Tickets *Tickets `yaml:"tickets"`
	// Webhook configures the Kubernetes validating admission webhook's own
	// TLS listener (docs/kubernetes.md); nil means no webhook.
	Webhook *Webhook `yaml:"webhook"`
	// DecisionLog is where one JSON line per admission goes: "stdout", a
	// file path (appended, mode 0600), or "off". Default: <data_dir>/decisions.jsonl.
	DecisionLog string `yaml:"decision_log"`
	// DecisionLogRotate rotates a decision log file (not stdout) by size
	// and age; see Rotate.
	DecisionLogRotate Rotate `yaml:"decision_log_rotate"`
	// Dev marks development mode; it is never read from a file.
	Dev bool `yaml:"-"`
}

// Rotate is when a decision log file is moved aside (renamed with a UTC
// timestamp, decisions-2026-12-01T15-04-05.000.jsonl) and a new one started.
// A line is never split across files and none is lost: rotation happens
// between two writes of the one writer.
type Rotate struct {
	// MaxSizeMB rotates before a write would take the file past this many
	// megabytes (default 100; at least 16, more than one line can take:
	// a line may hold a 1 MiB manifest, escaped).
	MaxSizeMB int `yaml:"max_size_mb"`
	// MaxAge rotates at the first write after the file is this old (0:
	// by size only).
	MaxAge Duration `yaml:"max_age"`
	// MaxBackups is how many rotated files are kept (0: all; the audit
	// record is yours to archive before deleting).
	MaxBackups int `yaml:"max_backups"`
}

// MinDecisionLogMB is the smallest decision_log_rotate.max_size_mb.
const MinDecisionLogMB = 16

func (r Rotate) validate() error {
	if r.MaxSizeMB < 0 || r.MaxAge < 0 || r.MaxBackups < 0 {
		return errors.New("decision_log_rotate: max_size_mb, max_age and max_backups must not be negative")
	}
	if r.MaxSizeMB != 0 && r.MaxSizeMB < MinDecisionLogMB {
		return fmt.Errorf("decision_log_rotate: max_size_mb must be 0 (100) or at least %d: a file must hold any one line", MinDecisionLogMB)
	}
	return nil
}

// Ledger selects the store.
type Ledger struct {
	// Driver is "bbolt" (default: one file, one process) or "postgres"
	// (several replicas share one database).
	Driver string `yaml:"driver"`
	// Path of the bbolt file; default <data_dir>/ledger.db. bbolt only.
	Path string `yaml:"path"`
	// DSN is the PostgreSQL connection string or URL (postgres only). Keep
	// the password out of it: PGPASSWORD and PGPASSFILE are honoured.
	DSN string `yaml:"dsn"`
	// Schema holds the ledger's tables (postgres only; default "itogate").
	Schema string `yaml:"schema"`
	// MaxConns bounds this replica's connections (postgres only; default
	// 16). Replicas × max_conns must stay below the server's
	// max_connections.
	MaxConns int32 `yaml:"max_conns"`
	// ConnectTimeout, StatementTimeout and AcquireTimeout bound connecting,
	// each statement (and row-lock wait) and the wait for a pooled
	// connection (postgres only; default 5s each).
	ConnectTimeout   Duration `yaml:"connect_timeout"`
	StatementTimeout Duration `yaml:"statement_timeout"`
	AcquireTimeout   Duration `yaml:"acquire_timeout"`
	// MigrationTimeout bounds the start-up migration, including the wait
	// for another replica migrating (postgres only; default 1m).
	MigrationTimeout Duration `yaml:"migration_timeout"`
	// Pooler is what sits between itogate and PostgreSQL (postgres only):
	// "none" (default: nothing, or a pooler in session mode) or
	// "transaction" (a pooler in transaction mode such as PgBouncer's
	// pool_mode=transaction: no named prepared statements, and the
	// isolation level and timeouts set in every transaction, since the
	// pooler drops startup parameters).
	Pooler string `yaml:"pooler"`
	// SweepInterval is how often expired confirmation tokens are dropped
	// (their tombstones stay forever); unset: the runtime's default (10m),
	// "0s" disables.
	SweepInterval *Duration `yaml:"sweep_interval"`
}

// Ledger drivers.
const (
	DriverBolt     = "bbolt"
	DriverPostgres = "postgres"
)

// Ledger poolers (ledger.pooler), as the postgres driver names them.
const (
	PoolerNone        = "none"
	PoolerTransaction = "transaction"
)

// postgresSchema mirrors postgres.ValidSchema without importing the driver.
var postgresSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (l Ledger) validate() error {
	var errs []error
	switch l.Driver {
	case DriverBolt:
		if l.DSN != "" || l.Schema != "" || l.MaxConns != 0 || l.ConnectTimeout != 0 || l.StatementTimeout != 0 ||
			l.AcquireTimeout != 0 || l.MigrationTimeout != 0 || l.Pooler != "" {
			errs = append(errs, errors.New("dsn, schema, max_conns, pooler and the timeouts are for driver postgres"))
		}
	case DriverPostgres:
		if l.DSN == "" {
			errs = append(errs, errors.New("dsn is required for driver postgres"))
		}
		if l.Path != "" {
			errs = append(errs, errors.New("path is for driver bbolt"))
		}
		if l.Schema != "" && !postgresSchema.MatchString(l.Schema) {
			errs = append(errs, fmt.Errorf("schema must match %s", postgresSchema))
		}
		if l.Pooler != "" && l.Pooler != PoolerNone && l.Pooler != PoolerTransaction {
			errs = append(errs, fmt.Errorf("pooler must be %q or %q", PoolerNone, PoolerTransaction))
		}
		if l.MaxConns < 0 || l.MaxConns > 1000 {
			errs = append(errs, errors.New("max_conns must be in [0, 1000] (0: default)"))
		}
		for _, d := range []struct {
			name string
			d    Duration
		}{
			{"connect_timeout", l.ConnectTimeout}, {"statement_timeout", l.StatementTimeout},
			{"acquire_timeout", l.AcquireTimeout}, {"migration_timeout", l.MigrationTimeout},
		} {
			if d.d < 0 {
				errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("driver %q is not supported (bbolt, postgres)", l.Driver))
	}
	if l.SweepInterval != nil && *l.SweepInterval < 0 {
		errs = append(errs, errors.New("sweep_interval must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Trust holds the key sets per purpose (docs/architecture.md §2); none may stand in for another.
// Evals (the eval authority: eval reports, 150M-ladder decisions) is
// optional: without it no eval-authority token verifies, so every stage
// advance and every large run on custom data is denied.
type Trust struct {
	Callers    TokenTrust `yaml:"callers"`
	Depositors TokenTrust `yaml:"depositors"`
	// Revokers is the entitlement issuer's revocation identity (POST
	// /v1/revocations: entitlements, bookings, caller keys). Optional:
	// without it those revocations are refused (401); confirmations are
	// revoked by the depositors' identity.
	Revokers TokenTrust `yaml:"revokers"`
	// Schedulers is the identity of the schedulers that check tickets
	// online and bind each run to one job (POST /v1/tickets/verify: a
	// Slurm prolog, a Ray job submitter). Optional: without it that route
	// refuses every call (401).
	Schedulers      TokenTrust    `yaml:"schedulers"`
	Entitlement     TokenTrust    `yaml:"entitlement"`
	Confirmation    TokenTrust    `yaml:"confirmation"`
	Evals           TokenTrust    `yaml:"evals"`
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

// Configured reports whether the purpose is configured at all (optional
// purposes, such as evals, are left out entirely).
func (t TokenTrust) Configured() bool {
	return t != TokenTrust{}
}

// validateEvals keeps the eval authority apart from every other purpose:
// its own issuer, audience and token type, so an entitlement, confirmation
// or caller token can never pass for an eval report.
func (t Trust) validateEvals() []error {
	var errs []error
	if err := t.Evals.validate(); err != nil {
		errs = append(errs, fmt.Errorf("trust.evals: %w", err))
	}
	if t.Evals.Type == "" {
		errs = append(errs, errors.New("trust.evals.type is required"))
	}
	for _, o := range append(t.required(), namedTrust{"revokers", t.Revokers}) {
		if !o.Configured() {
			continue
		}
		if t.Evals.Issuer == o.Issuer {
			errs = append(errs, fmt.Errorf("trust.evals: issuer is also trust.%s's; the eval authority needs its own", o.name))
		}
		if t.Evals.Audience == o.Audience {
			errs = append(errs, fmt.Errorf("trust.evals: audience is also trust.%s's; the eval authority needs its own", o.name))
		}
		if o.Type != "" && t.Evals.Type == o.Type {
			errs = append(errs, fmt.Errorf("trust.evals: type is also trust.%s's; the eval authority needs its own", o.name))
		}
	}
	return errs
}

// namedTrust is one purpose and its key under trust:.
type namedTrust struct {
	name string
	TokenTrust
}

// required are the purposes every configuration has, in the order of the
// file (validation reports them in this order).
func (t Trust) required() []namedTrust {
	return []namedTrust{
		{"callers", t.Callers}, {"depositors", t.Depositors},
		{"entitlement", t.Entitlement}, {"confirmation", t.Confirmation},
	}
}

// ManifestKey pins one manifest signer's public key (PEM, ECDSA P-256 or
// Ed25519), as `cosign sign-blob --key` users configure cosign.pub.
type ManifestKey struct {
	KeyID   string `yaml:"key_id"`
	PEMFile string `yaml:"pem_file"`
}

// Tickets configures admission tickets: a key purpose of its own, used for
// nothing else.
type Tickets struct {
	// Issuer is every ticket's iss, e.g. "https://itogate.example.com".
	Issuer string `yaml:"issuer"`
	// Audience is every ticket's aud (default ticket.DefaultAudience,
	// "itogate-workload"). It must differ from every trust audience: a
	// ticket is never an API token.
	Audience string `yaml:"audience"`
	// SigningKey is the PKCS#8 private key ("PRIVATE KEY" PEM) that signs
	// tickets, its key id and algorithm: EdDSA (Ed25519) or ES256.
	SigningKey TicketKey `yaml:"signing_key"`
	// PreviousJWKSFile, when set, holds public keys still published at
	// GET /v1/tickets/jwks after a rotation, until the tickets they signed
	// have expired.
	PreviousJWKSFile string `yaml:"previous_jwks_file"`
	// Leeway is the clock skew the webhook, the renewal and the online
	// check tolerate on a ticket's iat (default verify.DefaultLeeway, 30s;
	// at most 5m); never on exp, so the offline window stays the lifetime.
	Leeway Duration `yaml:"leeway"`
	// Lifetime is how long a ticket lives, exp − iat at most (default
	// ticket.DefaultLifetime, 5m; 1m to 1h): the holder renews it while the
	// run may run (POST /v1/runs/{run_id}/ticket).
	Lifetime Duration `yaml:"lifetime"`
}

// TicketKey is the ticket signing key.
type TicketKey struct {
	PEMFile   string `yaml:"pem_file"`
	KeyID     string `yaml:"key_id"`
	Algorithm string `yaml:"algorithm"`
}

// ListenerTLS is the API listener's serving certificate and key (PEM),
// re-read when either file changes, like the webhook's.
type ListenerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Webhook configures the Kubernetes validating admission webhook.
type Webhook struct {
	// Listen is the webhook's own TLS listener, e.g. ":9443" (the
	// apiserver calls webhooks over HTTPS only).
	Listen string `yaml:"listen"`
	// CertFile and KeyFile are the serving certificate and key (PEM). Both
	// are re-read when either file changes (cert-manager rotates them).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, requires the apiserver to present a client
	// certificate signed by this CA (the apiserver's
	// --admission-control-config-file kubeconfig for webhooks).
	ClientCAFile string `yaml:"client_ca_file"`
	// Namespaces binds namespaces to accounts: a GPU workload in namespace
	// N may only use tickets of account Namespaces[N]; a namespace the
	// webhook is called for (the configuration's namespaceSelector) that is
	// not listed is denied WORKLOAD_NAMESPACE_UNBOUND. (An AdmissionReview
	// carries no namespace labels, and the webhook makes no calls to the
	// apiserver, so the binding lives here.)
	Namespaces map[string]string `yaml:"namespaces"`
	// Timeout bounds one review (default webhook.DefaultTimeout, 2s, below
	// the 5s timeoutSeconds of the shipped ValidatingWebhookConfiguration).
	Timeout Duration `yaml:"timeout"`
	// MaxReviewBytes bounds one AdmissionReview body (default
	// webhook.DefaultMaxReviewBytes, 8 MiB; at most 64 MiB). A larger
	// review is denied REQUEST_TOO_LARGE with that reason.
	MaxReviewBytes int64 `yaml:"max_review_bytes"`
	// HTTP2 lets the listener negotiate HTTP/2; by default it serves
	// HTTP/1.1 only (CVE-2023-44487, rapid reset).
	HTTP2 bool `yaml:"http2"`
}

// Policy selects the bundle.
type Policy struct {
	// Bundle is the signed bundle to enforce (see bundles/README.md); nil
	// means the unsigned bundle embedded in the binary, which is logged.
	Bundle *Bundle `yaml:"bundle"`
	// Shadow is a candidate bundle evaluated beside the enforced one on
	// every admission the policy decides; disagreements are logged and
	// counted (itogate_shadow_decisions_total), never enforced.
	Shadow *Bundle `yaml:"shadow"`
	// Deadline bounds one evaluation (default policy.DefaultDeadline, 250ms).
	Deadline Duration `yaml:"deadline"`
}

// Bundle is a signed OPA bundle in a file or on a bundle server.
type Bundle struct {
	// File is a bundle archive (.tar.gz), re-read every poll_interval.
	File string `yaml:"file"`
	// URL is a bundle on a bundle server (OPA bundle protocol: ETag,
	// If-None-Match, 304), polled every poll_interval.
	URL string `yaml:"url"`
	// PollInterval is the wait between polls, ±10 % jitter. Default: one
	// per mode, both in package bundle: 1m (DefaultPollInterval), and 5s in
	// development mode (DevPollInterval: a rebuilt local bundle is enforced
	// at once).
	PollInterval Duration `yaml:"poll_interval"`
	// MaxAge, when set, stops enforcing a bundle this long after the
	// built_at in its signed .manifest: readiness fails and admissions are
	// denied with POLICY_BUNDLE_STALE. Zero disables the check.
	MaxAge Duration `yaml:"max_age"`
	// Timeout bounds one download, body included (default
	// bundle.DefaultHTTPTimeout, 30s).
	Timeout Duration `yaml:"timeout"`
	// MaxBytes bounds the archive (default bundle.DefaultMaxBytes, 16 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// VerificationKeys verify .signatures.json; a bundle must be signed by
	// one of them (several at once during a key rotation).
	VerificationKeys []BundleKey `yaml:"verification_keys"`
	// Scope, when set, must equal the signature's scope claim.
	Scope string `yaml:"scope"`
}

// BundleKey is one bundle verification key: the key id the signer writes
// into the signature (`opa build --verification-key-id`), its algorithm and
// a PEM public key.
type BundleKey struct {
	KeyID     string `yaml:"key_id"`
	Algorithm string `yaml:"algorithm"`
	PEMFile   string `yaml:"pem_file"`
}

// Bounds of the bundle section (the defaults are package bundle's).
const (
	maxBundleMaxBytes     = 256 << 20
	minBundlePollInterval = time.Second
)

// validate checks one bundle section. Development mode may omit the
// verification keys: it then trusts the published development bundle key.
func (b Bundle) validate(dev bool) error {
	var errs []error
	switch {
	case b.File != "" && b.URL != "":
		errs = append(errs, errors.New("give file or url, not both"))
	case b.File == "" && b.URL == "":
		errs = append(errs, errors.New("file or url is required (omit the bundle section for the embedded bundle)"))
	}
	if b.URL != "" {
		if u, err := url.Parse(b.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("url must be an absolute http or https URL"))
		} else if u.User != nil {
			errs = append(errs, errors.New("url must not carry credentials"))
		}
	}
	switch {
	case b.PollInterval < 0:
		errs = append(errs, errors.New("poll_interval must not be negative"))
	case b.PollInterval != 0 && time.Duration(b.PollInterval) < minBundlePollInterval && !dev:
		// Development mode polls as often as asked (tests swap bundles in
		// milliseconds); a fleet polling a bundle server does not.
		errs = append(errs, fmt.Errorf("poll_interval below %s", minBundlePollInterval))
	}
	if b.MaxAge < 0 || b.Timeout < 0 {
		errs = append(errs, errors.New("max_age and timeout must not be negative"))
	}
	if b.MaxBytes < 0 || b.MaxBytes > maxBundleMaxBytes {
		errs = append(errs, fmt.Errorf("max_bytes must be in [0, %d] (0: default)", maxBundleMaxBytes))
	}
	if len(b.VerificationKeys) == 0 && !dev {
		errs = append(errs, errors.New("verification_keys: at least one key (bundles must be signed)"))
	}
	seen := map[string]bool{}
	for i, k := range b.VerificationKeys {
		if k.KeyID == "" || k.Algorithm == "" || k.PEMFile == "" {
			errs = append(errs, fmt.Errorf("verification_keys[%d]: key_id, algorithm and pem_file are required", i))
		}
		if seen[k.KeyID] {
			errs = append(errs, fmt.Errorf("verification_keys[%d]: key_id %q given twice", i, k.KeyID))
		}
		seen[k.KeyID] = true
	}
	return errors.Join(errs...)
}

// Limits bound request handling.
type Limits struct {
	// MaxBodyBytes bounds a request body (default server.DefaultMaxBodyBytes,
	// 2 MiB: a 1 MiB manifest base64-encoded plus tokens).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RequestTimeout bounds a whole request (default
	// server.DefaultRequestTimeout, 5s).
	RequestTimeout Duration `yaml:"request_timeout"`
	// MaxConcurrentEvaluations bounds policy evaluations running at once
	// (default 0: one per CPU, GOMAXPROCS; -1: no bound). Evaluation is
	// CPU-bound, so more at once only stretches each past its deadline.
	MaxConcurrentEvaluations int `yaml:"max_concurrent_evaluations"`
	// MaxQueuedEvaluations bounds admissions waiting for a slot (default
	// admission.DefaultQueueFactor, 64, × the slots); beyond it they are
	// answered 503 ADMISSION_OVERLOADED at once.
	MaxQueuedEvaluations int `yaml:"max_queued_evaluations"`
	// MaxQueueWait bounds the wait for a slot (default
	// admission.DefaultQueueWait, 1s).
	MaxQueueWait Duration `yaml:"max_queue_wait"`
}

// Evaluations is the admission.Evaluations bound these limits give on a
// machine with procs CPUs (GOMAXPROCS).
func (l Limits) Evaluations(procs int) (slots, queue int, wait time.Duration) {
	switch {
	case l.MaxConcurrentEvaluations < 0:
		return 0, 0, 0
	case l.MaxConcurrentEvaluations == 0:
		slots = max(procs, 1)
	default:
		slots = l.MaxConcurrentEvaluations
	}
	return slots, l.MaxQueuedEvaluations, time.Duration(l.MaxQueueWait)
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

// Token types of the purposes that require one, and the bound on every
// leeway; configs may override issuer and audience but keep purposes apart.
const (
	MaxLeeway        = 5 * time.Minute
	TypeEntitlement  = "ito-entitlement+jwt"
	TypeConfirmation = "ito-confirmation+jwt"
	TypeEvals        = "ito-eval+jwt"
)

// defaults are the configuration-level defaults: where itogate listens,
// keeps its data and its ledger. Everything else left unset takes the
// default of the component it configures (the server's limits, the
// policy's deadline, the bundle source's poll interval …), applied in that
// component's own options.
func defaults() Config {
	return Config{
		Listen:  "127.0.0.1:8443",
		DataDir: "./data",
		Ledger:  Ledger{Driver: DriverBolt},
	}
}

// MaxFileBytes bounds the configuration file.
const MaxFileBytes = 1 << 20

// ReadFunc reads at most limit bytes of the file at path, or fails
// (safefile.ReadMounted, or a safefile.Snapshot's ReadFile).
type ReadFunc = func(path string, limit int64) ([]byte, error)

// Load reads a YAML file strictly, applies the --set assignments (each a
// "key=value" of Set, as if written in the file: relative paths resolve
// against the file's directory too) and validates the result. The file is
// read with safefile.ReadMounted: a regular file of at most MaxFileBytes,
// no symbolic link but within its own directory (a Kubernetes ConfigMap).
func Load(path string, sets ...string) (Config, error) {
	return LoadWith(safefile.ReadMounted, path, sets...)
}

// LoadWith is Load reading the file with read.
func LoadWith(read ReadFunc, path string, sets ...string) (Config, error) {
	raw, err := read(path, MaxFileBytes)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c := defaults()
	if err := decodeStrict(raw, &c); err != nil {
		return Config{}, fmt.Errorf("config: %s: %w", path, err)
	}
	if err := c.SetAll(sets...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
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

// decodeStrict decodes one YAML document into c, refusing unknown keys.
// Keys the document does not name keep their value in c.
func decodeStrict(raw []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	return dec.Decode(c)
}

// Dev returns the development configuration: the policy bundle embedded in
// the binary (policy.bundle unset), a bbolt ledger and the decision log in
// ./data, the published development keys of fixtures/keys (trust and
// tickets come from them, never from the configuration) and a loopback
// listener, 127.0.0.1:8443. Set changes any of it but trust and tickets;
// Validate refuses a listener that is not loopback.
func Dev() Config {
	c := defaults()
	c.Dev = true
	return c
}

// SetAll applies Set to each "key=value" assignment (the --set flag), in
// order.
func (c *Config) SetAll(assignments ...string) error {
	for _, a := range assignments {
		key, value, ok := strings.Cut(a, "=")
		if !ok || key == "" {
			return fmt.Errorf("--set %q: want key=value, the key dotted as in the file (limits.request_timeout=10s)", a)
		}
		if err := c.Set(key, value); err != nil {
			return fmt.Errorf("--set %s: %w", a, err)
		}
	}
	return nil
}

// Set assigns value, a YAML value ("10s", "off", "null", `"a quoted
// string"`, "{file: b.tar.gz}"), to key, a dotted path of YAML keys
// ("limits.request_timeout", "webhook.namespaces.team-a"). It is decoded
// with the same strict rules as the file: an unknown key or an ill-typed
// value is an error, and keys it does not name keep their value. An empty
// value is the empty string.
func (c *Config) Set(key, value string) error {
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(value), &v); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	node := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
	if len(v.Content) == 1 {
		node = v.Content[0]
	}
	parts := strings.Split(key, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		if parts[i] == "" {
			return fmt.Errorf("key %q: empty segment", key)
		}
		node = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: parts[i]}, node}}
	}
	raw, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	if err := decodeStrict(raw, c); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// One line, without the line numbers of a document nobody wrote.
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				msgs[i] = lineNumber.ReplaceAllString(m, "")
			}
			return errors.New(strings.Join(msgs, "; "))
		}
		return errors.New(lineNumber.ReplaceAllString(err.Error(), ""))
	}
	return nil
}

// lineNumber is the "line N: " yaml.v3 puts before each decoding error.
var lineNumber = regexp.MustCompile(`^line \d+: `)

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
	return loopbackOnly(c.Listen)
}

func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("development mode listens on loopback only, not %q", addr)
	}
	return nil
}

// Validate checks the whole configuration and reports every problem, in
// the order of the file's sections (the same message for the same
// configuration, every time). It does not read key files; the trust
// package does, and refuses development keys outside development mode. In
// development mode trust and tickets must be left out (the published
// development keys are used) and every listener must be loopback.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %w", err))
	} else if c.Dev {
		if err := c.LoopbackOnly(); err != nil {
			errs = append(errs, fmt.Errorf("listen: %w", err))
		}
	}
	if c.TLS != nil && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls: cert_file and key_file are required"))
	}
	if err := c.Ledger.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Dev {
		errs = append(errs, c.validateDevKeys()...)
	} else {
		errs = append(errs, c.Trust.validate()...)
	}
	errs = append(errs, c.Policy.validate(c.Dev)...)
	if c.Tickets != nil && !c.Dev {
		if err := c.Tickets.validate(c.Trust); err != nil {
			errs = append(errs, fmt.Errorf("tickets: %w", err))
		}
	}
	if c.Webhook != nil {
		errs = append(errs, c.validateWebhook()...)
	}
	errs = append(errs, c.Limits.validate()...)
	if err := c.DecisionLogRotate.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateDevKeys refuses trust and tickets sections in development mode:
// its keys are the published development keys, whatever a section says.
func (c Config) validateDevKeys() []error {
	var errs []error
	if !reflect.ValueOf(c.Trust).IsZero() {
		errs = append(errs, errors.New("trust: development mode trusts the published development keys "+
			"(fixtures/keys) only; configure trust in a --config file"))
	}
	if c.Tickets != nil {
		errs = append(errs, errors.New("tickets: development mode signs tickets with the published development "+
			"ticket key; configure tickets in a --config file"))
	}
	return errs
}

func (t Trust) validate() []error {
	var errs []error
	for _, p := range t.required() {
		if err := p.validate(); err != nil {
			errs = append(errs, fmt.Errorf("trust.%s: %w", p.name, err))
		}
	}
	if t.Revokers.Configured() {
		if err := t.Revokers.validate(); err != nil {
			errs = append(errs, fmt.Errorf("trust.revokers: %w", err))
		}
	}
	if t.Schedulers.Configured() {
		if err := t.Schedulers.validate(); err != nil {
			errs = append(errs, fmt.Errorf("trust.schedulers: %w", err))
		}
	}
	if t.Entitlement.Type == "" || t.Confirmation.Type == "" {
		errs = append(errs, errors.New("trust.entitlement.type and trust.confirmation.type are required"))
	}
	if t.Entitlement.Type == t.Confirmation.Type {
		errs = append(errs, errors.New("trust: entitlement and confirmation must use different token types"))
	}
	if t.Evals.Configured() {
		errs = append(errs, t.validateEvals()...)
	}
	if len(t.ManifestSigners) == 0 {
		errs = append(errs, errors.New("trust.manifest_signers: at least one key"))
	}
	for i, k := range t.ManifestSigners {
		if k.KeyID == "" || k.PEMFile == "" {
			errs = append(errs, fmt.Errorf("trust.manifest_signers[%d]: key_id and pem_file are required", i))
		}
	}
	return errs
}

func (p Policy) validate(dev bool) []error {
	var errs []error
	if p.Deadline < 0 {
		errs = append(errs, errors.New("policy.deadline must not be negative"))
	}
	if p.Bundle != nil {
		if err := p.Bundle.validate(dev); err != nil {
			errs = append(errs, fmt.Errorf("policy.bundle: %w", err))
		}
	}
	if p.Shadow != nil {
		if err := p.Shadow.validate(dev); err != nil {
			errs = append(errs, fmt.Errorf("policy.shadow: %w", err))
		}
	}
	return errs
}

func (c Config) validateWebhook() []error {
	var errs []error
	if c.Tickets == nil && !c.Dev {
		errs = append(errs, errors.New("webhook: needs the tickets section (the webhook verifies tickets)"))
	}
	if err := c.Webhook.validate(); err != nil {
		errs = append(errs, fmt.Errorf("webhook: %w", err))
	} else if c.Dev {
		if err := loopbackOnly(c.Webhook.Listen); err != nil {
			errs = append(errs, fmt.Errorf("webhook.listen: %w", err))
		}
	}
	return errs
}

func (l Limits) validate() []error {
	var errs []error
	if l.MaxBodyBytes < 0 || l.MaxBodyBytes > 16<<20 {
		errs = append(errs, errors.New("limits.max_body_bytes must be in [0, 16 MiB] (0: default)"))
	}
	if l.RequestTimeout < 0 {
		errs = append(errs, errors.New("limits.request_timeout must not be negative"))
	}
	if l.MaxConcurrentEvaluations < -1 || l.MaxQueuedEvaluations < 0 || l.MaxQueueWait < 0 {
		errs = append(errs, errors.New("limits.max_concurrent_evaluations must be -1 (no bound), 0 (one per CPU) or positive; "+
			"limits.max_queued_evaluations and limits.max_queue_wait must not be negative"))
	}
	return errs
}

func (t Tickets) validate(trust Trust) error {
	var errs []error
	if t.Issuer == "" {
		errs = append(errs, errors.New("issuer is required"))
	}
	if t.SigningKey.PEMFile == "" || t.SigningKey.KeyID == "" {
		errs = append(errs, errors.New("signing_key: pem_file and key_id are required"))
	}
	if a := t.SigningKey.Algorithm; a != "EdDSA" && a != "ES256" {
		errs = append(errs, errors.New("signing_key.algorithm must be EdDSA or ES256"))
	}
	aud := cmp.Or(t.Audience, ticket.DefaultAudience)
	for _, p := range trust.required() {
		if p.Audience == aud {
			errs = append(errs, fmt.Errorf("audience %q is also trust.%s's: tickets need their own", aud, p.name))
		}
	}
	if t.Leeway < 0 || time.Duration(t.Leeway) > MaxLeeway {
		errs = append(errs, fmt.Errorf("leeway must be in [0, %s]", MaxLeeway))
	}
	if l := time.Duration(t.Lifetime); l != 0 && (l < ticket.MinLifetime || l > ticket.MaxLifetime) {
		errs = append(errs, fmt.Errorf("lifetime must be in [%s, %s] (0: %s)", ticket.MinLifetime, ticket.MaxLifetime, ticket.DefaultLifetime))
	}
	return errors.Join(errs...)
}

func (w Webhook) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(w.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %w", err))
	}
	if w.CertFile == "" || w.KeyFile == "" {
		errs = append(errs, errors.New("cert_file and key_file are required (the apiserver calls webhooks over TLS only)"))
	}
	for _, ns := range slices.Sorted(maps.Keys(w.Namespaces)) {
		if ns == "" || w.Namespaces[ns] == "" {
			errs = append(errs, errors.New("namespaces: empty namespace or account"))
		}
	}
	if w.Timeout < 0 {
		errs = append(errs, errors.New("timeout must not be negative"))
	}
	if w.MaxReviewBytes < 0 || w.MaxReviewBytes > 64<<20 {
		errs = append(errs, errors.New("max_review_bytes must be between 0 (the default, 8 MiB) and 64 MiB"))
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

func (c *Config) resolvePaths(base string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	abs(&c.DataDir)
	if c.TLS != nil {
		abs(&c.TLS.CertFile)
		abs(&c.TLS.KeyFile)
	}
	if c.DecisionLog != "stdout" && c.DecisionLog != "off" {
		abs(&c.DecisionLog)
	}
	abs(&c.Ledger.Path)
	for _, b := range []*Bundle{c.Policy.Bundle, c.Policy.Shadow} {
		if b == nil {
			continue
		}
		abs(&b.File)
		for i := range b.VerificationKeys {
			abs(&b.VerificationKeys[i].PEMFile)
		}
	}
	for _, t := range []*TokenTrust{&c.Trust.Callers, &c.Trust.Depositors, &c.Trust.Revokers, &c.Trust.Schedulers, &c.Trust.Entitlement, &c.Trust.Confirmation, &c.Trust.Evals} {
		abs(&t.JWKSFile)
		abs(&t.PEMFile)
	}
	for i := range c.Trust.ManifestSigners {
		abs(&c.Trust.ManifestSigners[i].PEMFile)
	}
	if c.Tickets != nil {
		abs(&c.Tickets.SigningKey.PEMFile)
		abs(&c.Tickets.PreviousJWKSFile)
	}
	if c.Webhook != nil {
		abs(&c.Webhook.CertFile)
		abs(&c.Webhook.KeyFile)
		abs(&c.Webhook.ClientCAFile)
	}
}
