package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
)

// readDir reads every file of the decision log in dir (rotated ones and
// the current one) as one log, oldest first, and returns its decision ids.
func readDir(t *testing.T, dir string) (ids []string, files int) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "decisions*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// Rotated files carry a UTC timestamp and sort before the current one.
	sort.Slice(names, func(i, j int) bool {
		cur := filepath.Join(dir, "decisions.jsonl")
		if names[i] == cur || names[j] == cur {
			return names[j] == cur && names[i] != cur
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", n, fi.Mode().Perm())
		}
		f, err := os.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := decisionlog.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for _, ev := range evs {
			ids = append(ids, ev.DecisionID)
		}
	}
	return ids, len(names)
}

func writeLines(t *testing.T, l *decisionlog.Logger, from, n int, pad string) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("dec_%08d", i)
		ids = append(ids, id)
		l.Log(decisionlog.Event{DecisionID: id, Account: pad})
	}
	return ids
}

// TestDecisionLogRotatesBySizeWithoutLosingLines: past max_size_mb the
// file is moved aside and a new one started; every line is in exactly one
// file, whole, in order.
func TestDecisionLogRotatesBySizeWithoutLosingLines(t *testing.T) {
	dir := t.TempDir()
	rf := newRotatingFile(filepath.Join(dir, "decisions.jsonl"), config.Rotate{MaxSizeMB: 1})
	l := decisionlog.New(rf, decisionlog.Options{Sync: rf.Sync, Queue: 100000})
	pad := strings.Repeat("a", 1000) // ~1.2 KB a line: 1500 lines are ~1.8 MB
	want := writeLines(t, l, 0, 1500, pad)
	l.Close()
	rf.Close()
	got, files := readDir(t, dir)
	if files != 2 {
		t.Errorf("%d files, want the rotated one and the current one", files)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read back %d lines, wrote %d (or out of order)", len(got), len(want))
	}
	if l.Dropped("write") != 0 || l.Dropped("queue_full") != 0 {
		t.Fatal("lines dropped")
	}
}

// TestDecisionLogRotatesByAge: the first write after the file is max_age
// old goes to a new file.
func TestDecisionLogRotatesByAge(t *testing.T) {
	dir := t.TempDir()
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rf := newRotatingFile(filepath.Join(dir, "decisions.jsonl"), config.Rotate{MaxAge: config.Duration(24 * time.Hour)})
	rf.now, rf.opened = func() time.Time { return clock }, clock
	l := decisionlog.New(rf, decisionlog.Options{Sync: rf.Sync})
	want := writeLines(t, l, 0, 3, "")
	l.Close()
	clock = clock.Add(24 * time.Hour)
	l = decisionlog.New(rf, decisionlog.Options{Sync: rf.Sync})
	want = append(want, writeLines(t, l, 3, 2, "")...)
	l.Close()
	rf.Close()
	got, files := readDir(t, dir)
	if files != 2 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%d files holding %v, want 2 holding %v", files, got, want)
	}
}

// TestDecisionLogSplitsABatchLargerThanAFile: one Write larger than a
// file goes in pieces that end at line ends, rotating between them. (One
// rotation: lumberjack names rotated files to the millisecond, so two
// within one would collide; a file of at least 16 MB, as configuration
// requires, cannot fill that fast.)
func TestDecisionLogSplitsABatchLargerThanAFile(t *testing.T) {
	dir := t.TempDir()
	rf := newRotatingFile(filepath.Join(dir, "decisions.jsonl"), config.Rotate{MaxSizeMB: 1})
	var batch []byte
	var want []string
	for i := range 1400 { // ~1.5 MB
		id := fmt.Sprintf("dec_%08d", i)
		want = append(want, id)
		batch = append(batch, fmt.Sprintf(`{"decision_id":%q,"account":%q}`+"\n", id, strings.Repeat("b", 1000))...)
	}
	if n, err := rf.Write(batch); err != nil || n != len(batch) {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(batch))
	}
	rf.Close()
	got, files := readDir(t, dir)
	if files != 2 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%d files, %d lines read back of %d", files, len(got), len(want))
	}
}
