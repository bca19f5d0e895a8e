package decisionlog

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// diskWriter is a file that fails on demand, as a full disk does: while
// full, every Write fails with ENOSPC after writing half of what it was
// given (a torn line), and Sync fails too while syncFull.
type diskWriter struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	full     bool
	syncFull bool
	syncs    int
}

func (d *diskWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		n := len(p) / 2
		d.buf.Write(p[:n])
		return n, syscall.ENOSPC
	}
	return d.buf.Write(p)
}

func (d *diskWriter) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	if d.full || d.syncFull {
		return syscall.ENOSPC
	}
	return nil
}

func (d *diskWriter) set(full, syncFull bool) {
	d.mu.Lock()
	d.full, d.syncFull = full, syncFull
	d.mu.Unlock()
}

func (d *diskWriter) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.buf.String()
}

// states records OnState's calls.
type states struct {
	mu   sync.Mutex
	errs []error
}

func (s *states) on(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

func (s *states) got() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

func counting(drops map[string]int, mu *sync.Mutex) func(string) {
	return func(r string) {
		mu.Lock()
		drops[r]++
		mu.Unlock()
	}
}

// TestWriteAheadIsDurableBeforeItReturns: WriteAhead returns once its line
// (phase intent) is written and synced; Read leaves it out, ReadAll has it.
func TestWriteAheadIsDurableBeforeItReturns(t *testing.T) {
	d := &diskWriter{}
	l := New(d, Options{Sync: d.Sync, Required: true})
	defer l.Close()
	if !l.Required() {
		t.Fatal("Required() = false")
	}
	ev := event(nil)
	ev.Result = "allow"
	if err := l.WriteAhead(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if d.syncs != 1 || !strings.Contains(d.String(), `"phase":"intent"`) {
		t.Fatalf("after WriteAhead: %d syncs, log %q", d.syncs, d.String())
	}
	l.Log(event(nil))
	l.Close()
	all, err := ReadAll(strings.NewReader(d.String()))
	if err != nil || len(all) != 2 || all[0].Phase != PhaseIntent || all[1].Phase != "" {
		t.Fatalf("ReadAll = %+v, %v", all, err)
	}
	evs, err := Read(strings.NewReader(d.String()))
	if err != nil || len(evs) != 1 || evs[0].Phase != "" {
		t.Fatalf("Read = %+v, %v", evs, err)
	}
}

// TestFullDiskFailsWriteAheadAndRecovers: on a full disk WriteAhead fails,
// the log turns failing once (one OnState call however many lines fail),
// best-effort lines are dropped as "write"; when space returns a probe
// writes the gap line (on a line of its own after the torn one) and the
// log turns writable once.
func TestFullDiskFailsWriteAheadAndRecovers(t *testing.T) {
	d := &diskWriter{}
	var st states
	var mu sync.Mutex
	drops := map[string]int{}
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := New(d, Options{Sync: d.Sync, Required: true, OnState: st.on, OnDrop: counting(drops, &mu),
		Now: func() time.Time { return clock }})
	defer l.Close()
	ctx := context.Background()
	if err := l.Probe(ctx); err != nil || len(st.got()) != 0 {
		t.Fatalf("probe of a writable log: %v, states %v", err, st.got())
	}
	if err := l.WriteAhead(ctx, event(nil)); err != nil {
		t.Fatal(err)
	}

	d.set(true, false)
	for range 3 {
		l.Log(event(nil)) // best effort: lost
		err := l.WriteAhead(ctx, event(nil))
		if !errors.Is(err, ErrUnwritable) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("WriteAhead on a full disk = %v", err)
		}
	}
	if err := l.Probe(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Probe on a full disk = %v", err)
	}
	if got := st.got(); len(got) != 1 || !errors.Is(got[0], syscall.ENOSPC) {
		t.Fatalf("state changes %v, want one failure", got)
	}
	if !errors.Is(l.Fault(), syscall.ENOSPC) {
		t.Fatalf("Fault() = %v", l.Fault())
	}
	mu.Lock()
	if drops["write"] != 3 || len(drops) != 1 {
		t.Errorf("drops %v, want write: 3", drops)
	}
	mu.Unlock()

	d.set(false, false)
	clock = clock.Add(time.Minute)
	if err := l.Probe(ctx); err != nil {
		t.Fatalf("Probe after space returned = %v", err)
	}
	if got := st.got(); len(got) != 2 || got[1] != nil || l.Fault() != nil {
		t.Fatalf("state changes %v (fault %v), want failure then recovery", got, l.Fault())
	}
	if err := l.Probe(ctx); err != nil || len(st.got()) != 2 {
		t.Fatalf("a second probe: %v, states %v", err, st.got())
	}
	if err := l.WriteAhead(ctx, event(nil)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	all, err := ReadAll(strings.NewReader(d.String()))
	if err != nil {
		t.Fatalf("ReadAll of a log with torn lines before its gap line: %v\n%s", err, d.String())
	}
	// A full disk writes half of each batch (diskWriter): what precedes the
	// last gap line is torn lines and the gap lines of failed retries.
	first, gap, last := all[0], all[len(all)-2], all[len(all)-1]
	if first.Phase != PhaseIntent || gap.Phase != PhaseGap || last.Phase != PhaseIntent {
		t.Fatalf("first %q, last gap %q, last %q", first.Phase, gap.Phase, last.Phase)
	}
	if gap.GapSince == nil || !gap.GapSince.Equal(clock.Add(-time.Minute)) || !gap.Time.Equal(clock) || gap.GapLost != 3 {
		t.Errorf("gap line %+v since %v", gap, gap.GapSince)
	}
}

// TestFailedSyncIsAFailedWrite: a line written but not synced is not known
// durable: WriteAhead fails and the log is failing.
func TestFailedSyncIsAFailedWrite(t *testing.T) {
	d := &diskWriter{}
	var st states
	l := New(d, Options{Sync: d.Sync, Required: true, OnState: st.on})
	defer l.Close()
	d.set(false, true)
	if err := l.WriteAhead(context.Background(), event(nil)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteAhead with a failing sync = %v", err)
	}
	if len(st.got()) != 1 || l.Fault() == nil {
		t.Fatalf("states %v", st.got())
	}
}

// TestEveryDropReason drops one event for each of DropReasons.
func TestEveryDropReason(t *testing.T) {
	if got := strings.Join(DropReasons, ","); got != "mask_failed,guard,queue_full,encode,write" {
		t.Fatalf("DropReasons = %s: document and test a new reason", got)
	}
	jwt := "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl"
	cases := map[string]func(t *testing.T, l *Logger, d *blockingWriter){
		"mask_failed": func(t *testing.T, l *Logger, _ *blockingWriter) {
			ev := event(map[string]any{"a": 1})
			if l.Prepare(context.Background(), maskFunc(func(map[string]any) ([]string, error) {
				return nil, errors.New("boom")
			}), &ev) {
				t.Error("Prepare kept an event whose mask failed")
			}
		},
		"guard": func(t *testing.T, l *Logger, _ *blockingWriter) {
			// A secret-shaped map key outside the input: nothing to
			// redact it to, no input to remove.
			ev := event(nil)
			ev.JTIs = map[string]string{jwt: "j"}
			if l.Prepare(context.Background(), nil, &ev) {
				t.Error("Prepare kept an event the guard refuses")
			}
		},
		"encode": func(t *testing.T, l *Logger, _ *blockingWriter) {
			ev := event(map[string]any{"x": math.NaN()})
			if l.Prepare(context.Background(), nil, &ev) {
				t.Error("Prepare kept an event that cannot be encoded")
			}
		},
		"queue_full": func(t *testing.T, l *Logger, d *blockingWriter) {
			l.Log(event(nil)) // taken by the writer, which blocks
			<-d.entered
			l.Log(event(nil)) // the one queue slot
			l.Log(event(nil)) // dropped
			close(d.release)
		},
		"write": func(t *testing.T, l *Logger, d *blockingWriter) {
			d.fail = true
			close(d.release)
			l.Log(event(nil))
		},
	}
	for _, reason := range DropReasons {
		t.Run(reason, func(t *testing.T) {
			var mu sync.Mutex
			drops := map[string]int{}
			d := &blockingWriter{entered: make(chan struct{}, 8), release: make(chan struct{})}
			l := New(d, Options{Queue: 1, OnDrop: counting(drops, &mu)})
			cases[reason](t, l, d)
			select {
			case <-d.release:
			default:
				close(d.release)
			}
			l.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(drops) != 1 || drops[reason] != 1 || l.Dropped(reason) != 1 {
				t.Fatalf("drops %v, want %s: 1", drops, reason)
			}
		})
	}
}

// blockingWriter signals entered on each Write and waits for release; it
// fails when fail is set (before release is closed).
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	fail    bool
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.entered <- struct{}{}
	<-b.release
	if b.fail {
		return 0, syscall.EIO
	}
	return len(p), nil
}

// TestReadRefusesATornLineWithoutGap: half a line is skipped only where
// the gap line that explains it follows.
func TestReadRefusesATornLineWithoutGap(t *testing.T) {
	good := `{"decision_id":"dec_1","result":"allow"}`
	for name, log := range map[string]string{
		"torn at the end":      good + "\n" + `{"decision_id":"de`,
		"torn then a decision": `{"decision_id":"de` + "\n" + good + "\n",
	} {
		if _, err := ReadAll(strings.NewReader(log)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	evs, err := Read(strings.NewReader(`{"decision_id":"de` + "\n" + `{"phase":"gap","gap_lost":1}` + "\n" + good + "\n"))
	if err != nil || len(evs) != 1 {
		t.Fatalf("torn then gap: %+v, %v", evs, err)
	}
}

// TestStalledWriteFailsFastAndRecovers: a write that does not return (a
// hung disk) fails no call, so past Options.Stall the log counts as
// failing: Fault says so (one state change), WriteAhead fails at once;
// once the write returns, the next line records the gap and the log is
// writable again. The clock is the test's.
func TestStalledWriteFailsFastAndRecovers(t *testing.T) {
	var st states
	var mu sync.Mutex
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	advance := func(d time.Duration) {
		mu.Lock()
		clock = clock.Add(d)
		mu.Unlock()
	}
	d := &blockingWriter{entered: make(chan struct{}, 8), release: make(chan struct{})}
	l := New(d, Options{Required: true, Stall: 10 * time.Second, Now: now, OnState: st.on})
	defer l.Close()
	ctx := context.Background()
	stuck := make(chan error, 1)
	go func() { stuck <- l.WriteAhead(ctx, event(nil)) }()
	<-d.entered // the writer is inside Write

	advance(10 * time.Second) // not past Stall yet
	if err := l.Fault(); err != nil || len(st.got()) != 0 {
		t.Fatalf("at Stall: fault %v, states %v", err, st.got())
	}
	advance(time.Second)
	if err := l.Fault(); !errors.Is(err, ErrStalled) || !errors.Is(err, ErrUnwritable) {
		t.Fatalf("past Stall: fault %v", err)
	}
	if err := l.WriteAhead(ctx, event(nil)); !errors.Is(err, ErrStalled) {
		t.Fatalf("WriteAhead behind a stalled write = %v", err)
	}
	if got := st.got(); len(got) != 1 || !errors.Is(got[0], ErrStalled) {
		t.Fatalf("states %v, want one stall", got)
	}

	close(d.release) // the disk answers: the stuck line was written
	if err := <-stuck; err != nil {
		t.Fatalf("the stuck WriteAhead = %v; its line was written", err)
	}
	if err := l.WriteAhead(ctx, event(nil)); err != nil {
		t.Fatalf("WriteAhead after the stall = %v", err)
	}
	if got := st.got(); len(got) != 2 || got[1] != nil || l.Fault() != nil {
		t.Fatalf("states %v, fault %v; want the stall then recovery", got, l.Fault())
	}
}
