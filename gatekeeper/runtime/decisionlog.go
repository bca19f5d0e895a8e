package runtime

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
)

// openDecisionLog opens the decision log: "off", "stdout" or a file
// appended with mode 0600 (decisions name accounts and digests: not for
// everyone), rotated by size and age (decision_log_rotate) and synced after
// every batch of lines.
//
// In production the log is part of the decision (decisionlog.Options
// .Required): an allow is committed only once its write-ahead line is
// written and synced; while the log cannot be written, allows are refused
// (DECISION_LOG_UNAVAILABLE), /readyz fails, and the server log says so
// once when it starts and once when it ends. Development mode keeps the
// best-effort logger: a line that cannot be written is dropped and counted.
// The returned function writes what is queued and closes the log.
func (rt *Runtime) openDecisionLog() (*decisionlog.Logger, func(), error) {
	dest, m := rt.cfg.DecisionLogPath(), rt.metrics
	var opts decisionlog.Options
	opts = decisionlog.Options{
		OnDrop:   m.DecisionLogDropped,
		Required: !rt.cfg.Dev,
		Now:      rt.opts.Now,
		Stall:    decisionLogStall,
		OnState: func(err error) {
			m.DecisionLogWritable(err == nil)
			switch {
			case err != nil && opts.Required:
				rt.log.Error("decision log cannot be written: allows are refused (503 DECISION_LOG_UNAVAILABLE) "+
					"and /readyz fails until it can", "decision_log", dest, "err", err)
			case err != nil:
				rt.log.Error("decision log cannot be written: its lines are dropped (development mode: allows are "+
					"committed anyway)", "decision_log", dest, "err", err)
			default:
				rt.log.Info("decision log writable again: a gap line records what was lost", "decision_log", dest)
			}
		},
	}
	m.DecisionLogWritable(true)
	var w io.Writer
	closeW := func() {}
	switch dest {
	case "off":
		return nil, func() {}, nil
	case "stdout":
		// A pipe to the container runtime: written is handed over; there
		// is nothing to fsync.
		w = os.Stdout
	default:
		// Created (or checked writable) now, so a wrong path or owner
		// fails the start, not the first admission.
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("decision log: %w (create its directory for the user itogate runs as, or set decision_log: stdout or off)", err)
		}
		f.Close()
		rf := newRotatingFile(dest, rt.cfg.DecisionLogRotate)
		w, opts.Sync, closeW = rf, rf.Sync, func() { rf.Close() }
	}
	if rt.opts.DecisionLog != nil {
		w = rt.opts.DecisionLog(w, &opts)
	}
	l := decisionlog.New(w, opts)
	return l, func() { l.Close(); closeW() }, nil
}

// decisionLogStall is how long one write and fsync of the decision log may
// take before the log counts as failing (a hung disk or network volume).
const decisionLogStall = 10 * time.Second

// rotatingFile is the decision log file: lumberjack rotates it by size
// (before a write would take it past max_size_mb, so a batch of lines never
// spans two files) and keeps max_backups rotated files; rotation by age
// happens here, at the first write after the file is max_age old. Only the
// decision log's one writer goroutine calls Write and Sync.
type rotatingFile struct {
	lj     *lumberjack.Logger
	maxAge time.Duration
	now    func() time.Time
	mu     sync.Mutex
	opened time.Time
}

func newRotatingFile(path string, r config.Rotate) *rotatingFile {
	size := r.MaxSizeMB
	if size == 0 {
		size = 100
	}
	return &rotatingFile{
		lj:     &lumberjack.Logger{Filename: path, MaxSize: size, MaxBackups: r.MaxBackups},
		maxAge: time.Duration(r.MaxAge),
		now:    time.Now,
		opened: fileStart(path),
	}
}

// fileStart is when the file at path was started, as far as can be told
// (its modification time when it holds lines; now otherwise).
func fileStart(path string) time.Time {
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		return fi.ModTime()
	}
	return time.Now()
}

func (f *rotatingFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxAge > 0 && f.now().Sub(f.opened) >= f.maxAge {
		if err := f.lj.Rotate(); err != nil {
			return 0, err
		}
		f.opened = f.now()
	}
	// lumberjack refuses a write larger than a file: a large batch goes
	// in pieces that end at line ends (config keeps a file larger than
	// any one line can be).
	limit := f.lj.MaxSize << 20
	n := 0
	for len(p) > limit {
		cut := bytes.LastIndexByte(p[:limit], '\n') + 1
		if cut == 0 {
			break // one line beyond a file: lumberjack says so
		}
		w, err := f.lj.Write(p[:cut])
		n += w
		if err != nil {
			return n, err
		}
		p = p[cut:]
	}
	w, err := f.lj.Write(p)
	return n + w, err
}

// Sync makes what was written durable. lumberjack does not expose its file;
// fsync on another descriptor of the same file flushes it all (Linux), and
// as rotation only happens inside Write, the file at the path is the one
// the last batch went to.
func (f *rotatingFile) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := os.Open(f.lj.Filename)
	if err != nil {
		return err
	}
	defer fd.Close()
	return fd.Sync()
}

func (f *rotatingFile) Close() error { return f.lj.Close() }
