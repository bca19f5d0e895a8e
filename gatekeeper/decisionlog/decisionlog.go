// Package decisionlog writes one JSON line per admission decision: what was
// decided, by which bundle, about which request, and the facts it was decided
// on, so that `itogate replay` can re-evaluate it against a candidate bundle.
//
// Secrets are never written. Token and signature bytes never enter an event
// (the input holds verified claims, not tokens), the bundle's mask policy
// (data.ito.system.log.mask, as OPA's system.log.mask) removes what it names,
// and a hard-coded guard refuses any event that still holds something shaped
// like a token, a signature, a key or a credential: such a value is replaced
// by a marker (Redact, RedactKey), and the event is kept. An event whose mask
// policy fails is dropped and counted, never written unmasked.
package decisionlog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itocompute/itogate/internal/jsonvalue"
)

// Event is one decision. Times are RFC 3339 with nanoseconds (UTC); latency
// is in seconds.
type Event struct {
	DecisionID     string            `json:"decision_id"`
	Time           time.Time         `json:"time"`
	Account        string            `json:"account"`
	Action         string            `json:"action"`
	IdempotencyKey string            `json:"idempotency_key"`
	RequestDigest  string            `json:"request_digest"`
	ManifestDigest string            `json:"manifest_digest,omitempty"`
	JTIs           map[string]string `json:"jtis,omitempty"`    // purpose → jti
	KeyIDs         map[string]string `json:"key_ids,omitempty"` // purpose → key id
	BundleRevision string            `json:"bundle_revision"`
	BundleDigest   string            `json:"bundle_digest,omitempty"`
	Result         string            `json:"result"` // "allow" or "deny"
	Status         int               `json:"status"`
	Codes          []string          `json:"codes,omitempty"`
	RunID          string            `json:"run_id,omitempty"`
	LatencySeconds float64           `json:"latency_seconds"`
	// PolicyResult and PolicyCodes are what the policy itself decided; Result
	// and Codes are the final answer, which a ledger conflict or a fault after
	// the policy can still turn into a deny. Replay compares against these.
	PolicyResult string   `json:"policy_result,omitempty"`
	PolicyCodes  []string `json:"policy_codes,omitempty"`
	// PolicyWarnings are the warning codes the policy raised; [] when it
	// ran and raised none, absent when it did not run (or the log predates
	// the field: replay then does not compare warnings).
	PolicyWarnings []string `json:"policy_warnings"`
	// Input is the policy input the decision was made on, after masking.
	// Absent when the decision failed before the policy ran.
	Input map[string]any `json:"input,omitempty"`
	// Masked lists the JSON pointers the mask policy removed from Input.
	Masked []string `json:"masked,omitempty"`
	// Redacted lists the JSON pointers (into the event) of values the guard
	// found secret-shaped and replaced with Redact's marker; "/input" when
	// the input as a whole had to go. The event itself is always kept.
	Redacted []string `json:"redacted,omitempty"`
	// Phase is empty on the outcome line of a decision, PhaseIntent on the
	// write-ahead line of an allow about to be committed, PhaseGap on the
	// line that records a time the log could not be written.
	Phase string `json:"phase,omitempty"`
	// GapSince and GapLost are on a PhaseGap line only: since when the log
	// could not be written (Time is when it could again) and how many
	// lines were lost meanwhile.
	GapSince *time.Time `json:"gap_since,omitempty"`
	GapLost  int64      `json:"gap_lost,omitempty"`
}

// The phases of a line (Event.Phase).
const (
	// PhaseIntent is the write-ahead line of an allow: written and synced
	// before the ledger commit in production (Options.Required). Its
	// outcome line (same decision_id) follows the commit.
	PhaseIntent = "intent"
	// PhaseGap is written first when the log can be written again after a
	// failure: the lines lost between gap_since and time.
	PhaseGap = "gap"
)

// DropReasons are every reason an event is dropped (the reason label of
// itogate_decision_log_dropped_total; docs/operations.md explains each).
var DropReasons = []string{"mask_failed", "guard", "queue_full", "encode", "write"}

// Masker returns the JSON pointers (RFC 6901, e.g. "/manifest/data/0/uri")
// to remove from an input before it is logged.
type Masker interface {
	Mask(ctx context.Context, input map[string]any) ([]string, error)
}

// Logger writes events as JSON lines to w. Log never blocks the admission:
// events are queued and written by one goroutine; a full queue drops the
// event and counts it. WriteAhead waits: it returns once its line is
// written and synced (Options.Sync), or the error that kept it from being.
//
// One goroutine writes, in batches: every line queued meanwhile goes out in
// one Write and one Sync, so waiting admissions share one fsync.
type Logger struct {
	w       io.Writer
	opts    Options
	queue   chan item
	done    chan struct{}
	closeMu sync.Once
	// Written, Dropped count events; Dropped is by reason.
	written atomic.Int64
	dropped sync.Map // reason → *atomic.Int64

	busy atomic.Int64 // unix nanoseconds the current batch's Write began; 0: none

	mu    sync.Mutex
	fault error     // why the log cannot be written; nil when it can
	since time.Time // when it could not (fault != nil)
	lost  int64     // lines lost since then
}

// item is one queued line: an event, or none (a probe). done, when set,
// receives the outcome of writing it.
type item struct {
	ev    *Event
	done  chan error
	probe bool
}

// maxBatch bounds the lines written in one Write.
const maxBatch = 256

// Options configure a Logger.
type Options struct {
	// Queue is the number of events buffered before dropping (default 4096).
	Queue int
	// OnDrop is called with the reason whenever an event is dropped (one
	// of DropReasons).
	OnDrop func(reason string)
	// Sync, when set, makes what was written durable (fsync); it runs
	// after every batch, and its failure is a write failure.
	Sync func() error
	// Required makes the log part of the decision (production): an allow
	// is committed only after WriteAhead wrote its line (Required reports
	// it to the admission).
	Required bool
	// OnState is called whenever the log turns unwritable (err, the first
	// failure) or writable again (nil): once per change, never per line,
	// in order. It must not call the Logger.
	OnState func(err error)
	// Now is the clock of the gap lines and of Stall (default time.Now).
	Now func() time.Time
	// Stall, when positive, is how long one batch's Write and Sync may
	// take: past it the log counts as failing (a hung disk fails no write,
	// it just never returns), WriteAhead fails at once and Fault reports
	// it; the next batch written after the stuck one returns records the
	// gap and ends the failure.
	Stall time.Duration
}

// New starts a Logger writing to w.
func New(w io.Writer, opts Options) *Logger {
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Logger{w: w, opts: opts, queue: make(chan item, opts.Queue), done: make(chan struct{})}
	go l.run()
	return l
}

// Required reports whether an allow needs its write-ahead line
// (Options.Required).
func (l *Logger) Required() bool { return l.opts.Required }

// ErrUnwritable wraps every error WriteAhead and Probe return.
var ErrUnwritable = errors.New("decision log cannot be written")

// ErrStalled is the fault of a log whose write has not returned within
// Options.Stall.
var ErrStalled = fmt.Errorf("%w: a write has not returned", ErrUnwritable)

// WriteAhead writes ev as the write-ahead line of an allow (Phase
// PhaseIntent) and waits until it is written and synced. An error means
// the line is not known to be durable: the allow must not be committed.
// ev must be prepared (Prepare).
func (l *Logger) WriteAhead(ctx context.Context, ev Event) error {
	if l.stalled() {
		// It would queue behind a write that does not return; Fault
		// records the change of state.
		l.Fault()
		return ErrStalled
	}
	ev.Phase = PhaseIntent
	return l.wait(ctx, item{ev: &ev})
}

// Probe tries the log when it is failing: it writes the gap line (what was
// lost since the failure) and syncs. It returns nil at once when the log is
// writable. Readiness calls it, so that a log that can be written again is
// noticed without an admission.
func (l *Logger) Probe(ctx context.Context) error {
	if l.Fault() == nil {
		return nil
	}
	return l.wait(ctx, item{probe: true})
}

func (l *Logger) wait(ctx context.Context, it item) error {
	it.done = make(chan error, 1)
	select {
	case l.queue <- it:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnwritable, ctx.Err())
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnwritable, ctx.Err())
	}
}

// Fault is why the log cannot be written, nil when it can (as far as the
// last write knows).
func (l *Logger) Fault() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fault == nil && l.stalled() {
		l.fault, l.since, l.lost = ErrStalled, time.Unix(0, l.busy.Load()), 0
		l.changed(ErrStalled)
	}
	return l.fault
}

// stalled reports a Write (or Sync) running for longer than Options.Stall.
func (l *Logger) stalled() bool {
	b := l.busy.Load()
	return l.opts.Stall > 0 && b != 0 && l.opts.Now().Sub(time.Unix(0, b)) > l.opts.Stall
}

// changed reports a change of state (l.mu held, so that changes are
// reported in the order they happen).
func (l *Logger) changed(err error) {
	if l.opts.OnState != nil {
		l.opts.OnState(err)
	}
}

// Prepare masks ev.Input with m and applies the guard. It returns false when
// the event must be dropped (and has counted the drop): the mask policy
// failed, or the event cannot be encoded. A value the guard refuses — an
// idempotency key shaped like a JWT or a cloud key id, a credential the mask
// policy missed — is redacted (Redact), never a reason to lose the record:
// otherwise any caller could hide an admission from the audit log and from
// replay by choosing such a key.
func (l *Logger) Prepare(ctx context.Context, m Masker, ev *Event) bool {
	if ev.Input != nil && m != nil {
		paths, err := m.Mask(ctx, ev.Input)
		if err != nil {
			l.drop("mask_failed")
			return false
		}
		masked, err := Remove(ev.Input, paths)
		if err != nil {
			l.drop("mask_failed")
			return false
		}
		ev.Input, ev.Masked = masked, paths
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		l.drop("encode")
		return false
	}
	if Guard(raw) == "" {
		return true
	}
	if !redactEvent(ev, raw) {
		l.drop("guard")
		return false
	}
	return true
}

// Redact is what the logs write instead of a secret-shaped value s:
// "[redacted]". Values the guard accepts are returned unchanged.
func Redact(s string) string {
	if Guard([]byte(s)) == "" {
		return s
	}
	return "[redacted]"
}

// RedactKey is Redact for idempotency keys: the stand-in is itself a valid
// key, "redacted.sha256.<64 hex digits of the SHA-256 of s>", so an operator
// holding the key (the ledger keeps it) can still find its records, and a
// replayed decision sees a key of the same shape as the one decided on.
// Never for other values: the digest of a low-entropy credential (a password
// in a URI) can be guessed.
func RedactKey(s string) string {
	if Guard([]byte(s)) == "" {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return RedactedKeyPrefix + hex.EncodeToString(sum[:])
}

// RedactedKeyPrefix starts every idempotency key RedactKey replaced.
const RedactedKeyPrefix = "redacted.sha256."

// redactEvent replaces every string of the event the guard refuses with
// Redact's marker, then, if the guard still refuses (a secret-shaped object
// key, a secret split over values), removes the whole input. It reports
// false only when even that is refused.
func redactEvent(ev *Event, raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers stay exact through the round trip
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return false
	}
	var redacted []string
	for k, v := range doc {
		doc[k] = redactValue(v, "/"+escapePointer(k), &redacted)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return false
	}
	if Guard(out) != "" {
		if _, ok := doc["input"]; !ok {
			return false
		}
		delete(doc, "input")
		kept := redacted[:0]
		for _, p := range redacted {
			if !strings.HasPrefix(p, "/input/") {
				kept = append(kept, p)
			}
		}
		redacted = append(kept, "/input")
		if out, err = json.Marshal(doc); err != nil || Guard(out) != "" {
			return false
		}
	}
	var clean Event
	dec = json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&clean); err != nil {
		return false
	}
	clean.Redacted = redacted
	*ev = clean
	return true
}

func redactValue(v any, ptr string, redacted *[]string) any {
	switch x := v.(type) {
	case string:
		redact := Redact
		if ptr == "/idempotency_key" || strings.HasSuffix(ptr, "/idempotency_key") {
			redact = RedactKey
		}
		if r := redact(x); r != x {
			*redacted = append(*redacted, ptr)
			return r
		}
	case map[string]any:
		for k, e := range x {
			x[k] = redactValue(e, ptr+"/"+escapePointer(k), redacted)
		}
	case []any:
		for i, e := range x {
			x[i] = redactValue(e, ptr+"/"+strconv.Itoa(i), redacted)
		}
	}
	return v
}

// escapePointer escapes a member name for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// Log queues a prepared event.
func (l *Logger) Log(ev Event) {
	select {
	case l.queue <- item{ev: &ev}:
	default:
		l.lose(1)
		l.drop("queue_full")
	}
}

func (l *Logger) run() {
	defer close(l.done)
	batch := make([]item, 0, maxBatch)
	var buf bytes.Buffer
	for it := range l.queue {
		batch = append(batch[:0], it)
	more:
		for len(batch) < maxBatch {
			select {
			case it, ok := <-l.queue:
				if !ok {
					break more
				}
				batch = append(batch, it)
			default:
				break more
			}
		}
		l.write(&buf, batch)
	}
}

// write writes one batch in one Write, then syncs, and answers every
// waiting item. On failure every line of the batch is lost (the waiting
// ones are told; the others are dropped as "write") and the log is failing
// until a later batch is written and synced: that batch starts with the gap
// line, on a line of its own (a failed Write may have left half a line).
func (l *Logger) write(buf *bytes.Buffer, batch []item) {
	buf.Reset()
	enc := json.NewEncoder(buf)
	l.mu.Lock()
	failing, since, lost := l.fault != nil, l.since, l.lost
	l.mu.Unlock()
	if failing {
		now := l.opts.Now().UTC()
		s := since.UTC()
		buf.WriteByte('\n')
		_ = enc.Encode(Event{Phase: PhaseGap, Time: now, GapSince: &s, GapLost: lost})
	}
	lines := 0
	for i := range batch {
		if batch[i].ev == nil {
			continue
		}
		if err := enc.Encode(batch[i].ev); err != nil {
			l.drop("encode")
			l.answer(&batch[i], fmt.Errorf("%w: encode: %w", ErrUnwritable, err))
			batch[i].ev = nil
			continue
		}
		lines++
	}
	var err error
	if buf.Len() > 0 {
		l.busy.Store(l.opts.Now().UnixNano())
		if _, err = l.w.Write(buf.Bytes()); err == nil && l.opts.Sync != nil {
			err = l.opts.Sync()
		}
		l.busy.Store(0)
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrUnwritable, err)
		l.failed(err, batch)
		return
	}
	l.written.Add(int64(lines))
	if failing {
		l.recovered()
	}
	for i := range batch {
		l.answer(&batch[i], nil)
	}
}

func (l *Logger) answer(it *item, err error) {
	if it.done != nil {
		it.done <- err
		it.done = nil
	}
}

// failed records a failed batch: its waiting items are answered err, its
// other lines dropped; the first failure turns the log failing.
func (l *Logger) failed(err error, batch []item) {
	l.mu.Lock()
	if l.fault == nil {
		l.fault, l.since, l.lost = err, l.opts.Now(), 0
		l.changed(err)
	}
	l.mu.Unlock()
	for i := range batch {
		switch {
		case batch[i].done != nil:
			l.answer(&batch[i], err)
		case batch[i].ev != nil:
			l.lose(1)
			l.drop("write")
		}
	}
}

func (l *Logger) recovered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fault, l.lost = nil, 0
	l.changed(nil)
}

// lose counts a line lost while the log is failing (the gap line's
// gap_lost).
func (l *Logger) lose(n int64) {
	l.mu.Lock()
	if l.fault != nil {
		l.lost += n
	}
	l.mu.Unlock()
}

// Close flushes queued events and stops the writer.
func (l *Logger) Close() {
	l.closeMu.Do(func() { close(l.queue) })
	<-l.done
}

// Written is the number of events written.
func (l *Logger) Written() int64 { return l.written.Load() }

// Dropped is the number of events dropped for reason.
func (l *Logger) Dropped(reason string) int64 {
	v, ok := l.dropped.Load(reason)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (l *Logger) drop(reason string) {
	v, _ := l.dropped.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	if l.opts.OnDrop != nil {
		l.opts.OnDrop(reason)
	}
}

// guardPatterns are shapes no decision log line may contain, whatever the
// mask policy says: compact JWS/JWT, PEM blocks, long base64 runs (signatures,
// keys) and the credential shapes the data gate looks for.
var guardPatterns = []*regexp.Regexp{
	// Each starts with a literal so Go's regexp can skip ahead (one pattern
	// per prefix: an alternation or \b defeats that); the guard errs on
	// refusing.
	regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.`),
	regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*-----`),
	regexp.MustCompile(`AKIA[0-9A-Z]{16}`),
	regexp.MustCompile(`ASIA[0-9A-Z]{16}`),
	regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{30,}`),
	regexp.MustCompile(`github_pat_[A-Za-z0-9_]{20,}`),
	regexp.MustCompile(`hf_[A-Za-z0-9]{30,}`),
	regexp.MustCompile(`xox[abposr]-[A-Za-z0-9-]{10,}`),
	regexp.MustCompile(`glpat-[A-Za-z0-9_-]{20,}`),
	regexp.MustCompile(`://[^/?#@\s"]*(:|%3[Aa])[^/?#@\s"]*@|://[A-Za-z0-9_.~-]{20,}@`),
	regexp.MustCompile(`sk_live_[A-Za-z0-9_-]{20,}`),
	regexp.MustCompile(`rk_live_[A-Za-z0-9_-]{20,}`),
	regexp.MustCompile(`sk-(proj|ant|svcacct)-[A-Za-z0-9_-]{20,}`),
}

// signedURLParams are query parameters of presigned URLs, matched in a
// lower-cased copy (case-insensitive regexps cannot skip ahead).
var signedURLParams = []string{"x-amz-signature=", "x-goog-signature=", "sig=", "signature="}

// Guard returns a non-empty reason when raw holds something shaped like a
// secret. The reason names the shape, never the match.
func Guard(raw []byte) string {
	if longBase64Run(raw, 88) {
		return "secret-shaped content (long base64 run: a signature or key)"
	}
	lower := bytes.ToLower(raw)
	for _, p := range signedURLParams {
		if bytes.Contains(lower, []byte("?"+p)) || bytes.Contains(lower, []byte("&"+p)) {
			return "secret-shaped content (presigned URL)"
		}
	}
	for i, re := range guardPatterns {
		if re.Match(raw) {
			return fmt.Sprintf("secret-shaped content (pattern %d)", i)
		}
	}
	return ""
}

// longBase64Run reports a run of at least n base64 characters ([A-Za-z0-9+/]):
// 88 is the length of an Ed25519 signature and shorter than any ECDSA or RSA
// signature or key in base64. One linear pass; the equivalent regex has no
// literal prefix and cost more than every signature check of an admission.
func longBase64Run(raw []byte, n int) bool {
	run := 0
	for _, c := range raw {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/':
			run++
			if run >= n {
				return true
			}
		default:
			run = 0
		}
	}
	return false
}

// Remove returns a deep copy of doc without the values at the JSON pointers
// (object members are deleted; array elements are replaced by null so later
// pointers keep their meaning). An unparsable pointer is an error, so a
// broken mask policy drops the event instead of logging it unmasked.
func Remove(doc map[string]any, pointers []string) (map[string]any, error) {
	out, _ := jsonvalue.Clone(doc).(map[string]any)
	for _, p := range pointers {
		if p == "" || p[0] != '/' {
			return nil, fmt.Errorf("mask: %q is not a JSON pointer", p)
		}
		segs := strings.Split(p[1:], "/")
		for i, s := range segs {
			segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
		}
		removeAt(out, segs)
	}
	return out, nil
}

func removeAt(node any, segs []string) {
	if len(segs) == 0 {
		return
	}
	last := len(segs) == 1
	switch n := node.(type) {
	case map[string]any:
		if last {
			delete(n, segs[0])
			return
		}
		removeAt(n[segs[0]], segs[1:])
	case []any:
		var i int
		if _, err := fmt.Sscanf(segs[0], "%d", &i); err != nil || i < 0 || i >= len(n) {
			return
		}
		if last {
			n[i] = nil
			return
		}
		removeAt(n[i], segs[1:])
	}
}

// ErrNoEvents is returned by Read for an empty log.
var ErrNoEvents = errors.New("decision log: no events")

// Read parses a decision log (JSON lines) and returns its decisions: the
// outcome lines, without the write-ahead (PhaseIntent) and gap lines.
// Numbers are kept exact. Lines cut short by failed writes are skipped when
// the gap line that records the failure follows them; any other unparsable
// line is an error. A gap may be recorded more than once (a retry that
// failed again wrote part of its batch): the last gap line with a given
// gap_since has the count.
func Read(r io.Reader) ([]Event, error) {
	all, err := ReadAll(r)
	if err != nil {
		return nil, err
	}
	var out []Event
	for _, ev := range all {
		if ev.Phase == "" {
			out = append(out, ev)
		}
	}
	if len(out) == 0 {
		return nil, ErrNoEvents
	}
	return out, nil
}

// ReadAll is Read with every line: write-ahead and gap lines included.
func ReadAll(r io.Reader) ([]Event, error) {
	br := bufio.NewReader(r)
	var out []Event
	var torn error // the previous line did not parse
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("decision log: line %d: %w", n, rerr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.UseNumber()
			var ev Event
			err := dec.Decode(&ev)
			switch {
			case err != nil && torn != nil:
				// Retries during one failure tear lines too.
			case err != nil:
				torn = fmt.Errorf("decision log: line %d: %w", n, err)
			case torn != nil && ev.Phase != PhaseGap:
				return nil, torn
			default:
				torn = nil
				out = append(out, ev)
			}
		}
		if rerr != nil {
			break
		}
	}
	if torn != nil {
		return nil, torn
	}
	return out, nil
}
