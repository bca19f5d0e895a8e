package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itocompute/itogate/gatekeeper/policy"
)

// Defaults of a Manager.
const (
	// DefaultPollInterval is the wait between polls of a bundle file or
	// server (policy.bundle.poll_interval unset).
	DefaultPollInterval = time.Minute
	// DevPollInterval is development mode's default poll interval
	// (FromConfig): a bundle rebuilt with `make bundle` is enforced within
	// seconds.
	DevPollInterval = 5 * time.Second
	// DefaultMaxClockSkew is how far in the future a built_at may lie (the
	// builder's clock ahead of ours) before the bundle is refused.
	DefaultMaxClockSkew = 5 * time.Minute
	// pollJitter spreads the polls of many replicas: each wait is the
	// interval ±10 %.
	pollJitter = 0.1
	// minRetry is the first wait after a failed poll; it doubles up to the
	// poll interval.
	minRetry = time.Second
)

// ErrNotReady is Ready's answer while no bundle is active.
var ErrNotReady = errors.New("no verified policy bundle is active")

// Observer receives bundle events, for metrics. Result is "success" or
// "failure"; reason is "" on success.
type Observer interface {
	BundleActivation(result, reason string)
	BundleActive(revision, digest string, builtAt time.Time)
}

// Options configure a Manager.
type Options struct {
	// Source feeds Load and Run; a Manager without one only takes bundles
	// given to Activate.
	Source Source
	// Deadline bounds one evaluation (policy.Options.Deadline).
	Deadline time.Duration
	// MaxAge, when positive, is how long after its built_at a bundle is
	// enforced: older bundles are not activated, and the active one stops
	// deciding (api.CodePolicyBundleStale) and fails Ready.
	MaxAge time.Duration
	// MaxClockSkew tolerates a built_at this far in the future (default
	// DefaultMaxClockSkew).
	MaxClockSkew time.Duration
	// PollInterval is the wait between polls in Run (default
	// DefaultPollInterval), with ±10 % jitter.
	PollInterval time.Duration
	// Now is the clock (default time.Now).
	Now      func() time.Time
	Logger   *slog.Logger
	Observer Observer
}

// Info describes the active bundle.
type Info struct {
	Revision     string
	Digest       string
	Origin       string
	KeyID        string // "" when unsigned (embedded)
	BuiltAt      time.Time
	RevisionTime time.Time
	ActivatedAt  time.Time
	// Expires is when it stops being enforced (zero: never).
	Expires time.Time
}

type active struct {
	engine *policy.Engine
	info   Info
}

// Manager holds the active bundle: an atomic pointer to one immutable
// prepared engine. Activations are serialized; readers never block.
type Manager struct {
	opts   Options
	mu     sync.Mutex // serializes Load and Activate
	active atomic.Pointer[active]
	stale  atomic.Bool // last observed staleness, to log the transition once
}

// NewManager returns a Manager with no active bundle.
func NewManager(opts Options) (*Manager, error) {
	if opts.MaxAge < 0 {
		return nil, errors.New("bundle: negative max age")
	}
	if opts.MaxClockSkew <= 0 {
		opts.MaxClockSkew = DefaultMaxClockSkew
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts}, nil
}

// Decider is the admission decision of the active bundle, as Active returns
// it. It is an alias of an interface literal, not a new type: the very type
// the consumer's own alias (admission.Decider) names, so Active fits
// admission.Options.Policy while bundle imports nothing above it.
type Decider = interface {
	Decide(ctx context.Context, input map[string]any) (policy.Decision, error)
	Revision() string
}

// Active returns the active decider, or nil when no bundle is active (the
// admission then answers POLICY_NOT_READY). A request must call it once and
// use the returned decider throughout, so that it never mixes two bundles.
func (m *Manager) Active() Decider {
	if a := m.active.Load(); a != nil {
		return a.engine
	}
	return nil
}

// Engine is the active bundle's engine (nil when none is active), for
// callers that evaluate another of its entrypoints (the workload webhook).
func (m *Manager) Engine() *policy.Engine {
	if a := m.active.Load(); a != nil {
		return a.engine
	}
	return nil
}

// Info describes the active bundle; ok is false when there is none.
func (m *Manager) Info() (Info, bool) {
	if a := m.active.Load(); a != nil {
		return a.info, true
	}
	return Info{}, false
}

// Ready reports ErrNotReady without an active bundle and an error naming
// the revision when the active bundle is past its maximum age.
func (m *Manager) Ready() error {
	a := m.active.Load()
	if a == nil {
		return ErrNotReady
	}
	if a.engine.Stale(m.opts.Now()) {
		return fmt.Errorf("policy bundle %s is stale: built %s, max age %s",
			a.info.Revision, a.info.BuiltAt.Format(time.RFC3339), m.opts.MaxAge)
	}
	return nil
}

// Load fetches from the source once and activates what it returns. No
// change is not an error. On any error the active bundle stays.
func (m *Manager) Load(ctx context.Context) error {
	if m.opts.Source == nil {
		return errors.New("bundle: no source")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.opts.Source.Fetch(ctx)
	if err != nil {
		m.failed(err)
		return err
	}
	if b == nil {
		return nil
	}
	if err := m.activate(ctx, b); err != nil {
		// Let the source offer the same bytes again on the next poll: a
		// bundle from the future may become acceptable, and one that stays
		// unacceptable (a rollback, a stale bundle) keeps failing visibly
		// instead of hiding behind a 304.
		if f, ok := m.opts.Source.(interface{ Forget() }); ok {
			f.Forget()
		}
		return err
	}
	return nil
}

// Activate makes b the active bundle unless it is a rollback, stale, from
// the future or does not compile. Errors are *Error; the active bundle then
// stays.
func (m *Manager) Activate(ctx context.Context, b *Bundle) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.activate(ctx, b)
}

func (m *Manager) activate(ctx context.Context, b *Bundle) error {
	start := time.Now()
	now := m.opts.Now()
	cur := m.active.Load()
	if cur != nil && cur.info.Digest == b.Digest {
		return nil // the very same bundle
	}
	if err := m.admissible(cur, b, now); err != nil {
		m.failed(err)
		return err
	}
	var expires time.Time
	if m.opts.MaxAge > 0 {
		expires = b.BuiltAt.Add(m.opts.MaxAge)
	}
	engine, err := policy.New(ctx, policy.Options{
		Parsed: b.Parsed, Digest: b.Digest, Revision: b.Revision,
		Expires: expires, Now: m.opts.Now, Deadline: m.opts.Deadline,
	})
	if err != nil {
		reason := ReasonCompile
		if errors.Is(err, policy.ErrFactsModel) {
			reason = ReasonFactsModel
		}
		err = &Error{Reason: reason, Err: err}
		m.failed(err)
		return err
	}
	info := Info{Revision: b.Revision, Digest: b.Digest, Origin: b.Origin, KeyID: b.KeyID,
		BuiltAt: b.BuiltAt, RevisionTime: b.RevisionTime, ActivatedAt: now, Expires: expires}
	m.active.Store(&active{engine: engine, info: info})
	m.stale.Store(false)
	b.Parsed = nil // the engine owns it now
	if o := m.opts.Observer; o != nil {
		o.BundleActivation("success", "")
		o.BundleActive(info.Revision, info.Digest, info.BuiltAt)
	}
	attrs := []any{"revision", info.Revision, "digest", info.Digest, "origin", info.Origin,
		"key_id", info.KeyID, "activation_ms", time.Since(start).Milliseconds()}
	if cur != nil {
		attrs = append(attrs, "previous_revision", cur.info.Revision)
	}
	if !info.BuiltAt.IsZero() {
		attrs = append(attrs, "built_at", info.BuiltAt.Format(time.RFC3339))
	}
	if !expires.IsZero() {
		attrs = append(attrs, "expires", expires.Format(time.RFC3339))
	}
	m.opts.Logger.Info("policy bundle activated", attrs...)
	return nil
}

// admissible applies the signed-bundle rules: age, clock skew, and strictly
// increasing revisions. The embedded bundle (no revision time) is only ever
// the sole bundle of its Manager, and has no age.
func (m *Manager) admissible(cur *active, b *Bundle, now time.Time) error {
	if b.RevisionTime.IsZero() {
		if m.opts.MaxAge > 0 {
			return fail(ReasonManifest, "bundle %s has no build time, and a max age is configured", b.Revision)
		}
		return nil
	}
	if b.BuiltAt.After(now.Add(m.opts.MaxClockSkew)) {
		return fail(ReasonFuture, "bundle %s built_at %s is in the future", b.Revision, b.BuiltAt.Format(time.RFC3339))
	}
	if m.opts.MaxAge > 0 && now.Sub(b.BuiltAt) > m.opts.MaxAge {
		return fail(ReasonStale, "bundle %s built_at %s is older than the max age %s",
			b.Revision, b.BuiltAt.Format(time.RFC3339), m.opts.MaxAge)
	}
	if cur == nil || cur.info.RevisionTime.IsZero() {
		return nil
	}
	switch {
	case b.Revision == cur.info.Revision:
		return fail(ReasonRevisionReused, "revision %s is active with digest %s; this bundle has %s",
			b.Revision, cur.info.Digest, b.Digest)
	case !b.RevisionTime.After(cur.info.RevisionTime):
		return fail(ReasonRollback, "revision %s is not newer than the active %s", b.Revision, cur.info.Revision)
	}
	return nil
}

func (m *Manager) failed(err error) {
	reason := ReasonFetch
	var be *Error
	if errors.As(err, &be) {
		reason = be.Reason
	}
	if o := m.opts.Observer; o != nil {
		o.BundleActivation("failure", string(reason))
	}
	source := "activate"
	if m.opts.Source != nil {
		source = m.opts.Source.String()
	}
	attrs := []any{"source", source, "reason", string(reason), "err", err.Error()}
	if a := m.active.Load(); a != nil {
		attrs = append(attrs, "active_revision", a.info.Revision)
	} else {
		attrs = append(attrs, "active_revision", "")
	}
	m.opts.Logger.Error("policy bundle not activated; the active bundle stays", attrs...)
}

// Run polls the source until ctx is done: every PollInterval ±10 %, and
// after a failure sooner (1 s doubling up to the interval). It also logs
// once when the active bundle turns stale.
func (m *Manager) Run(ctx context.Context) {
	failures := 0
	for {
		wait := jitter(m.opts.PollInterval)
		if failures > 0 {
			backoff := minRetry << min(failures-1, 20)
			wait = jitter(min(backoff, m.opts.PollInterval))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := m.Load(ctx); err != nil {
			failures++
		} else {
			failures = 0
		}
		m.checkStale()
	}
}

func (m *Manager) checkStale() {
	err := m.Ready()
	stale := err != nil && !errors.Is(err, ErrNotReady)
	if stale && !m.stale.Swap(true) {
		m.opts.Logger.Error("policy bundle is stale: admissions are denied (POLICY_BUNDLE_STALE) until a newer bundle is activated",
			"err", err.Error())
	}
}

func jitter(d time.Duration) time.Duration {
	f := 1 + pollJitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}
