// Package patience holds the bounds tests give to things that must happen
// eventually. No correctness test may depend on the machine's speed: CI runs
// on shared two-core machines at load 10 and more under -race, where an
// evaluation that takes 5 ms when idle can take a second. So a test gives
// every policy deadline, request timeout and wait a bound it cannot hit
// (Deadline, Wait) and tests a deadline itself only against something made
// slow or blocked on purpose (a Rego rule scanning 10^8 numbers, a held lock,
// a handler that never answers), never against the machine's own pace.
package patience

import (
	"testing"
	"time"
)

// Deadline is the policy deadline and request timeout of a test that is not
// about deadlines: far beyond any evaluation, yet below the per-package
// timeout `make test` gives `go test` (30 minutes) so a real hang still
// fails with a message.
const Deadline = 5 * time.Minute

// Wait bounds Until: how long a test waits for something that must happen.
const Wait = 2 * time.Minute

// Until polls cond until it holds, failing the test (with what) if it does
// not within Wait. Polling backs off from 1 ms to 50 ms so a quick event is
// seen quickly and a slow one costs little CPU.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, Wait)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
