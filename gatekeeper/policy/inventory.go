package policy

import (
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/bundle"
)

// RequiredRules are the rules every enforced bundle must define: the
// entrypoint and each gate's deny set (docs/architecture.md §6). Rego makes a reference to
// a missing package undefined rather than an error, so a bundle that lost a
// gate would otherwise compile and quietly stop enforcing it.
var RequiredRules = []string{
	"data.ito.admission.decision",
	"data.ito.entitlement.deny",
	"data.ito.confirmation.deny",
	"data.ito.idempotency.deny",
	"data.ito.budget.deny",
	"data.ito.booking.deny",
	"data.ito.datasets.deny",
	"data.ito.parallelism.deny",
	"data.ito.manifest.deny",
	"data.ito.lifecycle.deny",
	"data.ito.checkpoint.deny",
	"data.ito.datachecks.deny",
	"data.ito.rlvr.deny",
}

// requireRules returns an error naming every rule of want that no module of
// b defines.
func requireRules(b *bundle.Bundle, want []string) error {
	have := map[string]bool{}
	for _, m := range b.Modules {
		if m.Parsed == nil {
			continue
		}
		for _, r := range m.Parsed.Rules {
			have[r.Ref().GroundPrefix().String()] = true
			have[m.Parsed.Package.Path.String()+"."+r.Head.Name.String()] = true
			if len(r.Head.Reference) > 0 {
				have[m.Parsed.Package.Path.Extend(r.Head.Reference[:1]).String()] = true
			}
		}
	}
	var missing []string
	for _, w := range want {
		if !have[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("policy: bundle is incomplete: no rule %s", strings.Join(missing, ", "))
	}
	return nil
}
