package admission

import (
	"context"
	"slices"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/policy"
)

// ShadowResult compares a candidate bundle's decision with the enforced one
// for the same input. Only the enforced decision ever takes effect.
type ShadowResult struct {
	DecisionID       string
	EnforcedRevision string
	ShadowRevision   string
	// Agree is true when both allow, or both deny with the same codes.
	Agree bool
	// Kind is "agree", "allow_to_deny", "deny_to_allow", "codes" or "error".
	Kind          string
	EnforcedCodes []string
	ShadowCodes   []string
	Err           error
}

// shadowSlots bounds shadow evaluations in flight; when full, a shadow
// evaluation is skipped (counted by the caller as "skipped") rather than
// queued, so a slow candidate can never slow the enforced path.
const shadowSlots = 4

// shadow evaluates the candidate bundle on input in the background and
// reports the comparison through Options.OnShadow.
func (s *Service) shadow(ctx context.Context, tr *trace, enforced policy.Decision) {
	if s.opts.Shadow == nil || s.opts.OnShadow == nil {
		return
	}
	cand := s.opts.Shadow()
	if cand == nil {
		return
	}
	select {
	case s.shadowSem <- struct{}{}:
	default:
		s.opts.OnShadow(ShadowResult{DecisionID: tr.decisionID, Kind: "skipped"})
		return
	}
	input, id, rev := tr.input, tr.decisionID, tr.decider.Revision()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer func() { <-s.shadowSem }()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res := ShadowResult{DecisionID: id, EnforcedRevision: rev, ShadowRevision: cand.Revision(),
			EnforcedCodes: codesOf(enforced.Violations)}
		// the candidate's own facts, from its own tables: never the enforced bundle's
		d, err := cand.Decide(ctx, WithFactsCopy(input, FactsOf(cand)))
		switch {
		case err != nil:
			res.Kind, res.Err = "error", err
		default:
			res.ShadowCodes = codesOf(d.Violations)
			switch {
			case enforced.Allow && !d.Allow:
				res.Kind = "allow_to_deny"
			case !enforced.Allow && d.Allow:
				res.Kind = "deny_to_allow"
			case !slices.Equal(res.EnforcedCodes, res.ShadowCodes):
				res.Kind = "codes"
			default:
				res.Kind, res.Agree = "agree", true
			}
		}
		s.opts.OnShadow(res)
	}()
}

func codesOf(fs []api.Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, string(f.Code))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
