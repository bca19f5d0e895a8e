package admission

import (
	"context"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// writeAhead writes the write-ahead line of an allow about to be committed
// and waits until it is written and synced, when the decision log is
// required (production). When it cannot be, the allow is denied with
// DECISION_LOG_UNAVAILABLE (503) and nothing is committed: no allow exists
// in the ledger without its line in the log. Why the log failed is said
// once per change by the log's owner (decisionlog.Options.OnState), not
// here per request.
func (s *Service) writeAhead(ctx context.Context, p *pending, rec ledger.Admission) (Outcome, bool) {
	l := s.opts.DecisionLog
	if l == nil || !l.Required() {
		return Outcome{}, false
	}
	ev := decisionlog.Event{
		DecisionID: rec.DecisionID, Time: p.now.UTC(), Account: rec.Account, Action: string(rec.Action),
		IdempotencyKey: rec.IdempotencyKey, RequestDigest: rec.RequestDigest, ManifestDigest: rec.ManifestDigest,
		JTIs: p.tr.jtis, KeyIDs: p.tr.keyIDs, BundleRevision: rec.BundleRevision, Result: "allow",
		Status: 200, RunID: rec.RunID, PolicyResult: "allow", PolicyWarnings: []string{},
	}
	if d, ok := p.decider.(interface{ Digest() string }); ok {
		ev.BundleDigest = d.Digest()
	}
	for _, w := range p.decision.Warnings {
		ev.PolicyWarnings = append(ev.PolicyWarnings, string(w.Code))
	}
	if l.Prepare(ctx, nil, &ev) && l.WriteAhead(ctx, ev) == nil {
		return Outcome{}, false
	}
	data := p.data()
	data.Decision, data.State = "deny", api.StateDenied
	return Outcome{Code: api.CodeDecisionLogUnavailable,
		Message: "allowed by policy, but the decision log cannot be written; denied, nothing was consumed or stored", Data: data}, true
}

// logDecision writes the admission to the decision log: ids, digests, key
// ids and jtis (never tokens), the bundle, the outcome and, when the policy
// ran, its masked input and its own result for `itogate replay`.
func (s *Service) logDecision(ctx context.Context, caller Caller, req Request, tr *trace, out Outcome, took time.Duration) {
	if s.opts.DecisionLog == nil {
		return
	}
	ev := decisionlog.Event{
		DecisionID: tr.decisionID, Time: s.opts.Now().UTC(), Account: caller.Account, Action: string(req.Action),
		IdempotencyKey: req.IdempotencyKey, RequestDigest: tr.requestDigest, ManifestDigest: tr.manifestDigest,
		JTIs: tr.jtis, KeyIDs: tr.keyIDs, Status: out.HTTPStatus(), LatencySeconds: took.Seconds(), Result: "deny",
	}
	if out.OK() {
		ev.Result = "allow"
	}
	if out.Data != nil {
		ev.RunID, ev.BundleRevision = out.Data.RunID, out.Data.BundleRevision
		if out.Data.DecisionID != "" {
			// A replayed allow carries the original decision's id.
			ev.DecisionID = out.Data.DecisionID
		}
	}
	for _, v := range out.Violations {
		ev.Codes = append(ev.Codes, string(v.Code))
	}
	if !out.OK() && len(ev.Codes) == 0 {
		ev.Codes = []string{string(out.Code)}
	}
	var masker decisionlog.Masker
	if tr.decider == nil {
		tr.decider = s.opts.Policy() // the bundle that would have decided
		if tr.decider == nil {
			ev.BundleRevision = ""
		}
	}
	if tr.decider != nil {
		ev.BundleRevision = tr.decider.Revision()
		if d, ok := tr.decider.(interface{ Digest() string }); ok {
			ev.BundleDigest = d.Digest()
		}
	}
	if tr.decision != nil {
		// The mask was evaluated with the decision, on the same input.
		masker = tr.decision
		ev.Input = tr.input
		ev.PolicyResult = "deny"
		if tr.decision.Allow {
			ev.PolicyResult = "allow"
		}
		for _, v := range tr.decision.Violations {
			ev.PolicyCodes = append(ev.PolicyCodes, string(v.Code))
		}
		ev.PolicyWarnings = []string{} // the policy ran: [] means none
		for _, w := range tr.decision.Warnings {
			ev.PolicyWarnings = append(ev.PolicyWarnings, string(w.Code))
		}
	}
	if s.opts.DecisionLog.Prepare(ctx, masker, &ev) {
		s.opts.DecisionLog.Log(ev)
	}
}
