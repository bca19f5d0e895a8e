package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ticket"
)

// TicketSigner signs admission tickets (package ticket).
type TicketSigner interface {
	Issue(c ticket.Claims) (string, error)
}

// ticketClaims are the claims of the ticket for an allowed train.create: the
// run, the admitted topology from the verified manifest, and an exp no later
// than the booking term's end (entitlement term.end) or the run's declared
// wall-clock end (now + budget.max_wall_clock_hours), whichever is first,
// and at most lifetime after now: the holder renews it (RenewTicket).
func ticketClaims(rec ledger.Admission, doc, entitlement map[string]any, lifetime time.Duration) (ticket.Claims, error) {
	hw, _ := doc["hardware"].(map[string]any)
	budget, _ := doc["budget"].(map[string]any)
	term, _ := entitlement["term"].(map[string]any)
	nodes, err1 := intOf(hw["nodes"])
	perNode, err2 := intOf(hw["gpus_per_node"])
	hours, err3 := floatOf(budget["max_wall_clock_hours"])
	termEnd, err4 := intOf(term["end"])
	gpuType, _ := hw["gpu_type"].(string)
	region, _ := hw["region"].(string)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return ticket.Claims{}, fmt.Errorf("ticket facts: %w", err)
	}
	return ticket.Claims{
		Account: rec.Account, ID: rec.DecisionID, RunID: rec.RunID, BookingID: rec.BookingID,
		Action: string(rec.Action), ManifestDigest: rec.ManifestDigest,
		WorldSize: nodes * perNode, Nodes: nodes, GPUsPerNode: perNode, GPUType: gpuType, Region: region,
		BundleRevision: rec.BundleRevision,
		IssuedAt:       rec.CreatedAt,
		Expiry:         ticket.Capped(ticket.Expiry(rec.CreatedAt, time.Unix(termEnd, 0), hours), rec.CreatedAt, lifetime),
	}, nil
}

// RunTopology is the claims c of a run's ticket with the topology the run
// holds now, gpus (its run record's GPUs): a run a stage advance grew to a
// larger stage (of the run's gpus_per_node: a stage sets only its nodes)
// gets world_size gpus and nodes gpus / gpus_per_node; a run holding the
// ticket's world_size or fewer keeps c's (a run never shrinks). gpus that
// are no whole number of the ticket's nodes fail: no ticket then, never
// one for another topology.
func RunTopology(c ticket.Claims, gpus int) (ticket.Claims, error) {
	g := int64(gpus)
	if g <= c.WorldSize {
		return c, nil
	}
	if c.GPUsPerNode < 1 || g%c.GPUsPerNode != 0 {
		return ticket.Claims{}, fmt.Errorf("ticket: the run's %d GPUs are no whole number of nodes of %d GPUs", g, c.GPUsPerNode)
	}
	c.WorldSize, c.Nodes = g, g/c.GPUsPerNode
	return c, nil
}

// intOf reads an integer from a manifest (json.Number) or verified claims
// (int64) value.
func intOf(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case json.Number:
		return n.Int64()
	}
	return 0, fmt.Errorf("%v is not an integer", v)
}

func floatOf(v any) (float64, error) {
	switch n := v.(type) {
	case int64:
		return float64(n), nil
	case float64:
		return n, nil
	case json.Number:
		return n.Float64()
	}
	return 0, fmt.Errorf("%v is not a number", v)
}
