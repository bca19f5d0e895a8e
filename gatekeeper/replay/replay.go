// Package replay re-evaluates logged decisions against a candidate bundle
// and reports every decision that would flip: the impact of a policy change
// before it ships. A logged event carries the exact (masked) input its
// decision was made on, including `now`, so the replay is deterministic.
//
// A decision is compared only when both sides decided. An evaluation that
// produced no decision — the candidate's (POLICY_TIMEOUT,
// POLICY_EVALUATION_FAILED, …) or the logged one's (the server answered
// with such a code and logged no input) — is counted apart from the flips:
// a timeout on a loaded machine says nothing about what the candidate
// decides. A candidate's POLICY_TIMEOUT is retried once before it counts.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/policy"
)

// Decider is the candidate bundle.
type Decider interface {
	Decide(ctx context.Context, input map[string]any) (policy.Decision, error)
}

// Flip is one decision whose outcome, codes or warnings differ under the
// candidate. Both sides decided: an evaluation that failed is an
// EvalError, never a Flip.
type Flip struct {
	DecisionID string   `json:"decision_id"`
	Before     string   `json:"before"` // "allow" or "deny"
	After      string   `json:"after"`  // "allow" or "deny"
	Added      []string `json:"added,omitempty"`
	Removed    []string `json:"removed,omitempty"`
	// WarningsAdded and WarningsRemoved are warning codes (advisories):
	// they change no outcome but are what the caller sees.
	WarningsAdded   []string `json:"warnings_added,omitempty"`
	WarningsRemoved []string `json:"warnings_removed,omitempty"`
}

// EvalError is one logged decision the candidate could not evaluate (after
// one retry of a timeout): no decision, so no flip.
type EvalError struct {
	DecisionID string `json:"decision_id"`
	Before     string `json:"before"` // the logged outcome, "allow" or "deny"
	// Code is the evaluation's code: POLICY_TIMEOUT, POLICY_EVALUATION_FAILED,
	// POLICY_DECISION_INVALID, POLICY_FACTS_VERSION_MISMATCH,
	// POLICY_BUNDLE_STALE, or INTERNAL_ERROR for an error of no code.
	Code  string `json:"code"`
	Error string `json:"error"`
}

// Report summarises a replay.
type Report struct {
	Events   int `json:"events"`
	Replayed int `json:"replayed"`
	// Skipped events carry no input: they were decided before the policy
	// ran (a bad signature, an unknown confirmation) and no bundle changes them.
	Skipped int `json:"skipped"`
	// Masked events lost decided-on facts to the mask policy or the guard
	// (a manifest that held a credential, a redacted value): re-evaluating
	// what is left would differ under any bundle, so they are not replayed.
	// The confirmation reference, which the mask always removes and no rule
	// reads, and a redacted idempotency key (its stand-in keeps the key's
	// shape) do not count.
	Masked    int              `json:"masked"`
	Unchanged int              `json:"unchanged"`
	Flips     []Flip           `json:"flips"`
	ByCode    map[string]Count `json:"by_code"`
	// AllowToDeny and DenyToAllow count outcome flips; the rest only change codes.
	AllowToDeny int `json:"allow_to_deny"`
	DenyToAllow int `json:"deny_to_allow"`
	// Errors are the replayed decisions the candidate could not evaluate,
	// counted apart from Unchanged and Flips (Replayed is the sum of the
	// three); ErrorsByCode counts them by code.
	Errors       []EvalError    `json:"errors"`
	ErrorsByCode map[string]int `json:"errors_by_code"`
	// BaselineErrors are logged decisions the server's own evaluation did
	// not produce (it answered POLICY_TIMEOUT, POLICY_EVALUATION_FAILED,
	// POLICY_DECISION_INVALID, POLICY_FACTS_VERSION_MISMATCH or
	// INTERNAL_ERROR and logged no input): nothing to compare, not replayed,
	// counted apart from Skipped. BaselineByCode counts them by code.
	BaselineErrors int            `json:"baseline_errors"`
	BaselineByCode map[string]int `json:"baseline_errors_by_code"`
}

// Retries is how many times Run evaluates a decision again after a
// POLICY_TIMEOUT before counting it as an EvalError.
const Retries = 1

// baselineCodes are the answers of a server whose evaluation produced no
// decision.
var baselineCodes = []string{string(api.CodePolicyTimeout), string(api.CodePolicyEvaluationFailed),
	string(api.CodePolicyDecisionInvalid), string(api.CodePolicyFactsMismatch), string(api.CodeInternal)}

// Count is how often a code appears or disappears.
type Count struct {
	Added   int `json:"added"`
	Removed int `json:"removed"`
}

// Run replays events against d.
func Run(ctx context.Context, d Decider, events []decisionlog.Event) Report {
	r := Report{Events: len(events), ByCode: map[string]Count{}, Flips: []Flip{}, Errors: []EvalError{},
		ErrorsByCode: map[string]int{}, BaselineByCode: map[string]int{}}
	for _, ev := range events {
		if ev.Input == nil && ev.PolicyResult != "" && slices.Contains(ev.Redacted, "/input") {
			r.Masked++
			continue
		}
		if ev.Input == nil && ev.PolicyResult == "" && len(ev.Codes) == 1 && slices.Contains(baselineCodes, ev.Codes[0]) {
			r.BaselineErrors++
			r.BaselineByCode[ev.Codes[0]]++
			continue
		}
		if ev.Input == nil || ev.PolicyResult == "" {
			r.Skipped++
			continue
		}
		if lostFacts(ev) {
			r.Masked++
			continue
		}
		r.Replayed++
		before := set(ev.PolicyCodes)
		dec, err := decide(ctx, d, ev.Input)
		if err != nil {
			code := string(api.CodeInternal)
			var pe *policy.Error
			if errors.As(err, &pe) {
				code = string(pe.Code)
			}
			r.Errors = append(r.Errors, EvalError{DecisionID: ev.DecisionID, Before: ev.PolicyResult, Code: code, Error: err.Error()})
			r.ErrorsByCode[code]++
			continue
		}
		after := map[string]bool{}
		for _, v := range dec.Violations {
			after[string(v.Code)] = true
		}
		outcome := "allow"
		if !dec.Allow {
			outcome = "deny"
		}
		added, removed := diff(before, after)
		var wAdded, wRemoved []string
		if ev.PolicyWarnings != nil { // logs before warnings were recorded: not compared
			afterW := map[string]bool{}
			for _, w := range dec.Warnings {
				afterW[string(w.Code)] = true
			}
			wAdded, wRemoved = diff(set(ev.PolicyWarnings), afterW)
		}
		if outcome == ev.PolicyResult && len(added)+len(removed)+len(wAdded)+len(wRemoved) == 0 {
			r.Unchanged++
			continue
		}
		r.Flips = append(r.Flips, Flip{DecisionID: ev.DecisionID, Before: ev.PolicyResult, After: outcome, Added: added, Removed: removed,
			WarningsAdded: wAdded, WarningsRemoved: wRemoved})
		added, removed = append(added, wAdded...), append(removed, wRemoved...)
		switch {
		case ev.PolicyResult == "allow" && outcome == "deny":
			r.AllowToDeny++
		case ev.PolicyResult == "deny" && outcome == "allow":
			r.DenyToAllow++
		}
		for _, c := range added {
			n := r.ByCode[c]
			n.Added++
			r.ByCode[c] = n
		}
		for _, c := range removed {
			n := r.ByCode[c]
			n.Removed++
			r.ByCode[c] = n
		}
	}
	return r
}

// decide evaluates input, again after a POLICY_TIMEOUT (Retries times): a
// timeout is as likely the machine's load as the bundle's cost.
func decide(ctx context.Context, d Decider, input map[string]any) (policy.Decision, error) {
	for try := 0; ; try++ {
		dec, err := d.Decide(ctx, input)
		var pe *policy.Error
		if err == nil || try == Retries || !errors.As(err, &pe) || pe.Code != api.CodePolicyTimeout || ctx.Err() != nil {
			return dec, err
		}
	}
}

// alwaysMasked is what the mask removes from every event: the confirmation
// reference, an opaque handle no rule reads.
const alwaysMasked = "/confirmation/ref"

// redactedKey is where a secret-shaped idempotency key sits in the input;
// its stand-in (decisionlog.RedactKey) has the key's own shape, which is
// all a rule can check of an opaque key, so the decision still replays.
const redactedKey = "/input/request/idempotency_key"

// lostFacts reports whether the mask or the guard took anything from the
// event's input beyond the confirmation reference and the key's content.
func lostFacts(ev decisionlog.Event) bool {
	for _, p := range ev.Masked {
		if p != alwaysMasked {
			return true
		}
	}
	for _, p := range ev.Redacted {
		if p != redactedKey && (p == "/input" || strings.HasPrefix(p, "/input/")) {
			return true
		}
	}
	return false
}

// Print writes the report as a table grouped by code. Every string of the
// log (decision ids, codes, errors) is printed inert.
func (r Report) Print(w io.Writer) {
	t := inert.Text
	fmt.Fprintf(w, "events %d, replayed %d, skipped %d (decided before the policy), masked %d (input lost facts to the mask), unchanged %d, flipped %d\n",
		r.Events, r.Replayed, r.Skipped, r.Masked, r.Unchanged, len(r.Flips))
	fmt.Fprintf(w, "allow → deny %d, deny → allow %d\n", r.AllowToDeny, r.DenyToAllow)
	fmt.Fprintf(w, "could not evaluate: candidate %d%s, logged decision %d%s (not flips)\n",
		len(r.Errors), byCode(r.ErrorsByCode), r.BaselineErrors, byCode(r.BaselineByCode))
	if len(r.ByCode) > 0 {
		codes := make([]string, 0, len(r.ByCode))
		for c := range r.ByCode {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		fmt.Fprintln(w, "\nCODE                                  NEWLY RAISED  NO LONGER RAISED")
		for _, c := range codes {
			fmt.Fprintf(w, "%-37s %12d  %16d\n", t(c), r.ByCode[c].Added, r.ByCode[c].Removed)
		}
	}
	if len(r.Flips) > 0 {
		fmt.Fprintln(w, "\nDECISION                              BEFORE  AFTER  CHANGE")
		for _, f := range r.Flips {
			var parts []string
			for _, c := range f.Added {
				parts = append(parts, "+"+c)
			}
			for _, c := range f.Removed {
				parts = append(parts, "-"+c)
			}
			for _, c := range f.WarningsAdded {
				parts = append(parts, "+"+c+" (warning)")
			}
			for _, c := range f.WarningsRemoved {
				parts = append(parts, "-"+c+" (warning)")
			}
			change := strings.Join(parts, " ")
			fmt.Fprintf(w, "%-37s %-7s %-6s %s\n", t(f.DecisionID), t(f.Before), t(f.After), t(change))
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintln(w, "\nNOT EVALUATED                         BEFORE  CODE                      ERROR")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "%-37s %-7s %-25s %s\n", t(e.DecisionID), t(e.Before), t(e.Code), t(e.Error))
		}
	}
}

// byCode is " (CODE n, …)" sorted by code, "" for none.
func byCode(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	for _, c := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", inert.Text(c), m[c]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func set(codes []string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

func diff(before, after map[string]bool) (added, removed []string) {
	for c := range after {
		if !before[c] {
			added = append(added, c)
		}
	}
	for c := range before {
		if !after[c] {
			removed = append(removed, c)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}
