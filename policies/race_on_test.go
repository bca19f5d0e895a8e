//go:build race

package policies

// raceDetector: the race detector slows OPA evaluation about tenfold, so
// TestParallelismModel checks a smaller sample under -race; `make test` also
// runs it without -race at the full count.
const raceDetector = true
