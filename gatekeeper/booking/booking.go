// Package booking computes, in Go and from verified facts only, what a
// train.create takes from its booking: the GPUs the run holds, the GPUs the
// booking has, when the run stops holding them, and the run's compute cost.
//
// The ledger enforces these at commit whatever the policy bundle decided
// (capacity, the confirmation's bound cost), so a faulty bundle cannot
// admit a run the booking cannot carry. The cost includes the GPU-hours the
// checkpoint model expects the run to lose to failures (WithLostWork). The same quantities are computed in
// Rego (policies/ito/budget) to explain a decision; this package is the
// defence in depth, not the explanation.
package booking

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"time"
)

// DefaultGrace is the run grace when the bundle names none (or an invalid
// one): how long after its declared wall-clock end a run still holds its
// GPUs (time to checkpoint, drain and tear down). Erring long only makes
// capacity stricter.
const DefaultGrace = time.Hour

// MaxGrace bounds the grace a bundle may set.
const MaxGrace = 7 * 24 * time.Hour

// Run is what a train.create takes from its booking.
type Run struct {
	// GPUs is the run's world size: manifest hardware.nodes ×
	// hardware.gpus_per_node.
	GPUs int
	// BookedGPUs is the booking's GPUs: entitlement gpu.nodes ×
	// gpu.gpus_per_node.
	BookedGPUs int
	// End is the declared wall-clock end: now + budget.max_wall_clock_hours.
	End time.Time
	// TermEnd is the entitlement's term.end.
	TermEnd time.Time
	// PriceMicroUSD is the entitlement's price_per_gpu_hour_usd in micro-USD.
	PriceMicroUSD int64
	// ComputeMicroUSD is GPUs × hours × price_per_gpu_hour_usd in micro-USD,
	// rounded up to the cent, plus (after WithLostWork) the expected lost
	// work at the same price, rounded up to the cent — the budget gate's
	// compute formula, exact.
	ComputeMicroUSD int64
	// LostWorkMicroUSD is the part of ComputeMicroUSD that pays for the
	// GPU-hours expected lost to failures (0 until WithLostWork).
	LostWorkMicroUSD int64
}

// WithLostWork is r with the expected lost work added to its compute cost:
// lostCentiGPUHours (input.facts.budget.lost_centi_gpu_hours: hundredths of
// the GPU-hours the checkpoint model expects the run to lose to failures,
// W × centi-hours × lost_fraction rounded up) at r's price, rounded up to
// the cent — the budget gate's lost_work_micro_usd, exact. It fails with
// ErrFacts for a negative count and when the cost leaves int64.
func (r Run) WithLostWork(lostCentiGPUHours int64) (Run, error) {
	if lostCentiGPUHours < 0 {
		return Run{}, fmt.Errorf("booking: lost GPU-hours are negative: %w", ErrFacts)
	}
	lost := new(big.Int).Mul(big.NewInt(lostCentiGPUHours), big.NewInt(r.PriceMicroUSD))
	lost = ceilCent(ceilDiv(lost, big.NewInt(100)))
	total := new(big.Int).Add(lost, big.NewInt(r.ComputeMicroUSD))
	if !lost.IsInt64() || !total.IsInt64() {
		return Run{}, fmt.Errorf("booking: compute cost with lost work out of range: %w", ErrFacts)
	}
	r.LostWorkMicroUSD, r.ComputeMicroUSD = lost.Int64(), total.Int64()
	return r, nil
}

// ceilCent rounds micro-USD up to the cent (10,000 µUSD).
func ceilCent(micro *big.Int) *big.Int {
	c := ceilDiv(micro, big.NewInt(10_000))
	return c.Mul(c, big.NewInt(10_000))
}

// ErrFacts: the manifest or entitlement lacks a field the computation needs
// or holds it in a shape the schema/policy would refuse.
var ErrFacts = errors.New("booking facts invalid")

// ForCreate computes Run from the parsed manifest (numbers as json.Number)
// and the verified entitlement claims (numbers int64 or float64) at now.
func ForCreate(manifest, entitlement map[string]any, now time.Time) (Run, error) {
	bad := func(what string) (Run, error) { return Run{}, fmt.Errorf("booking: %s: %w", what, ErrFacts) }
	hw, _ := manifest["hardware"].(map[string]any)
	nodes, ok1 := Count(hw["nodes"])
	per, ok2 := Count(hw["gpus_per_node"])
	if !ok1 || !ok2 {
		return bad("manifest hardware.nodes and hardware.gpus_per_node must be positive integers")
	}
	gpu, _ := entitlement["gpu"].(map[string]any)
	bNodes, ok1 := Count(gpu["nodes"])
	bPer, ok2 := Count(gpu["gpus_per_node"])
	if !ok1 || !ok2 {
		return bad("entitlement gpu.nodes and gpu.gpus_per_node must be positive integers")
	}
	budget, _ := manifest["budget"].(map[string]any)
	centiHours, ok := centi(budget["max_wall_clock_hours"])
	if !ok || centiHours <= 0 {
		return bad("manifest budget.max_wall_clock_hours must be a positive number with at most 2 decimals")
	}
	if centiHours > maxCentiHours {
		return bad("manifest budget.max_wall_clock_hours out of range")
	}
	term, _ := entitlement["term"].(map[string]any)
	termEnd, ok := Count(term["end"])
	if !ok {
		return bad("entitlement term.end must be unix seconds")
	}
	price, _ := entitlement["price_per_gpu_hour_usd"].(string)
	priceMicro, err := MicroUSD(price)
	if err != nil {
		return bad("entitlement price_per_gpu_hour_usd must be a decimal USD string")
	}
	if nodes > 1<<20 || per > 1<<20 || bNodes > 1<<20 || bPer > 1<<20 {
		return bad("GPU counts out of range")
	}
	// W × centi-hours × µUSD / 100, rounded up to the cent (10,000 µUSD).
	cost := new(big.Int).Mul(big.NewInt(nodes*per), big.NewInt(centiHours))
	cost.Mul(cost, big.NewInt(priceMicro))
	cost = ceilCent(ceilDiv(cost, big.NewInt(100)))
	if !cost.IsInt64() {
		return bad("compute cost out of range")
	}
	return Run{
		GPUs:            int(nodes * per),
		BookedGPUs:      int(bNodes * bPer),
		End:             now.Add(time.Duration(centiHours) * 36 * time.Second),
		TermEnd:         time.Unix(termEnd, 0).UTC(),
		PriceMicroUSD:   priceMicro,
		ComputeMicroUSD: cost.Int64(),
	}, nil
}

// WorldSize is a manifest's world size, hardware.nodes ×
// hardware.gpus_per_node (json.Number, int64 or int values), each a
// positive count of at most 2^20: for a train.stage.advance, of the
// stage's effective manifest (the GPUs its run grows to when it holds
// fewer). It fails with ErrFacts for anything else and for a product
// above 2^31-1 (what the ledger stores).
func WorldSize(manifest map[string]any) (int, error) {
	hw, _ := manifest["hardware"].(map[string]any)
	nodes, ok1 := Count(hw["nodes"])
	per, ok2 := Count(hw["gpus_per_node"])
	if !ok1 || !ok2 || nodes > 1<<20 || per > 1<<20 || nodes*per > math.MaxInt32 {
		return 0, fmt.Errorf("booking: manifest hardware.nodes and hardware.gpus_per_node must be positive integers "+
			"whose product is at most 2^31-1: %w", ErrFacts)
	}
	return int(nodes * per), nil
}

// maxCentiHours is the longest run, in centi-hours (36 s each), whose end
// now + hours still fits a time.Duration (about 2.56 million hours); beyond
// it the duration would wrap and put the end in the past.
const maxCentiHours = int64(math.MaxInt64 / (36 * time.Second))

func ceilDiv(a, b *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

var reDecimal = regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,6}))?$`)

// MicroUSD parses a plain decimal USD string with at most 6 decimals ("2.49")
// into exact micro-USD (2490000).
func MicroUSD(s string) (int64, error) {
	m := reDecimal.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("booking: %q is not a plain decimal USD amount: %w", s, ErrFacts)
	}
	whole, _ := strconv.ParseInt(m[1], 10, 64)
	frac := m[2] + "000000"[:6-len(m[2])]
	f, _ := strconv.ParseInt(frac, 10, 64)
	return whole*1_000_000 + f, nil
}

// Count reads a positive integer count from a manifest (json.Number),
// verified claims (int64) or a decision estimate (int, or a whole float64
// below 2^53); ok is false for anything else, zero and negatives included.
func Count(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil && i > 0
	case int64:
		return n, n > 0
	case int:
		return int64(n), n > 0
	case float64:
		if n > 0 && n == float64(int64(n)) && n < 1<<53 {
			return int64(n), true
		}
	}
	return 0, false
}

var reCenti = regexp.MustCompile(`^(0|[1-9][0-9]{0,8})(?:\.([0-9]{1,2}))?$`)

// centi reads a number with at most 2 decimals as exact hundredths, from its
// decimal text (never through a float).
func centi(v any) (int64, bool) {
	var s string
	switch n := v.(type) {
	case json.Number:
		s = string(n)
	case int64:
		s = strconv.FormatInt(n, 10)
	default:
		return 0, false
	}
	m := reCenti.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	whole, _ := strconv.ParseInt(m[1], 10, 64)
	frac := m[2] + "00"[:2-len(m[2])]
	f, _ := strconv.ParseInt(frac, 10, 64)
	return whole*100 + f, true
}

// Grace reads the bundle's run grace (whole seconds, 0..MaxGrace) from the
// decision's estimates["run_grace_seconds"]; DefaultGrace when absent or
// invalid.
func Grace(estimates map[string]any) time.Duration {
	var secs int64
	switch n := estimates["run_grace_seconds"].(type) {
	case json.Number:
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return DefaultGrace
		}
		secs = v
	case int64:
		secs = n
	case float64:
		if n != float64(int64(n)) {
			return DefaultGrace
		}
		secs = int64(n)
	default:
		return DefaultGrace
	}
	// compared in seconds: secs × time.Second could wrap to a negative grace
	if secs < 0 || secs > int64(MaxGrace/time.Second) {
		return DefaultGrace
	}
	return time.Duration(secs) * time.Second
}

// EstimateMicroUSD returns, in micro-USD, the larger of compute (Go's own
// compute cost, micro-USD) and the bundle's estimates["total_cost_micro_usd"]
// when that is a whole number: the cost the confirmation must cover at
// commit.
func EstimateMicroUSD(compute int64, estimates map[string]any) int64 {
	var total int64
	switch n := estimates["total_cost_micro_usd"].(type) {
	case json.Number:
		if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			total = v
		}
	case int64:
		total = n
	case float64:
		if n == float64(int64(n)) {
			total = int64(n)
		}
	}
	return max(compute, total)
}
