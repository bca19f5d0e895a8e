//go:build race

package policy_test

// raceDetector: the race detector slows OPA evaluation about tenfold, so
// TestFactsMatchReference checks a sample under -race; `make test` also runs
// it without -race at the full count.
const raceDetector = true
