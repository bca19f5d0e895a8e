package booking_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/internal/regonum"
	"github.com/itocompute/itogate/policies"
)

// The Rego side of the differential: the production bundle's helpers applied
// to the same facts ForCreate reads. A rule is absent from the result when
// the Rego is undefined for the input.
const harness = `package booking_differential

import data.ito.budget
import data.ito.lib

micro_usd := lib.micro_usd(input.entitlement.price_per_gpu_hour_usd)

ceil_cent := lib.ceil_cent(micro_usd)

usd := lib.usd(micro_usd)

centi := lib.centi(input.manifest.budget.max_wall_clock_hours)

# the budget gate's own rule, not a copy of its formula: the booked
# compute (ForCreate's; the expected lost work comes from the training
# facts, Run.WithLostWork)
compute := budget.facts_reference.booked_compute_micro_usd

compute_usd := lib.usd(compute)
`

// prepareMoney returns data.booking_differential prepared against the
// production bundle (policies.Bundle: lib.rego and budget.rego as shipped),
// once per test binary.
func prepareMoney(tb testing.TB) rego.PreparedEvalQuery {
	tb.Helper()
	q, err := moneyQuery()
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

var moneyQuery = sync.OnceValues(func() (rego.PreparedEvalQuery, error) {
	loader, err := bundle.NewFSLoader(policies.Bundle())
	if err != nil {
		return rego.PreparedEvalQuery{}, err
	}
	b, err := bundle.NewCustomReader(loader).WithRegoVersion(ast.RegoV1).WithProcessAnnotations(true).Read()
	if err != nil {
		return rego.PreparedEvalQuery{}, err
	}
	return rego.New(
		rego.Query("data.booking_differential"),
		rego.ParsedBundle("itogate", &b),
		rego.Module("booking_differential.rego", harness),
		rego.StrictBuiltinErrors(true), // as the server evaluates
	).PrepareForEval(context.Background())
})

// regoMoney is what the Rego helpers give; nil fields are undefined.
type regoMoney struct {
	microUSD, ceilCent, centi, compute *big.Int
	usd, computeUSD                    *string
}

func evalMoney(t *testing.T, q rego.PreparedEvalQuery, manifest, entitlement map[string]any) regoMoney {
	t.Helper()
	rs, err := q.Eval(context.Background(), rego.EvalInput(map[string]any{
		"manifest": manifest, "entitlement": entitlement, "now": now.Unix(),
	}))
	if err != nil {
		t.Fatalf("rego: %v", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("rego: %d results", len(rs))
	}
	obj, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		t.Fatalf("rego: result %T", rs[0].Expressions[0].Value)
	}
	integer := func(k string) *big.Int {
		v, ok := obj[k]
		if !ok {
			return nil
		}
		n, ok := v.(json.Number)
		i, ok2 := new(big.Int).SetString(string(n), 10)
		if !ok || !ok2 {
			t.Fatalf("rego: %s = %#v, not an integer", k, v)
		}
		return i
	}
	str := func(k string) *string {
		v, ok := obj[k]
		if !ok {
			return nil
		}
		s, ok := v.(string)
		if !ok {
			t.Fatalf("rego: %s = %#v, not a string", k, v)
		}
		return &s
	}
	return regoMoney{
		microUSD: integer("micro_usd"), ceilCent: integer("ceil_cent"), centi: integer("centi"),
		compute: integer("compute"), usd: str("usd"), computeUSD: str("compute_usd"),
	}
}

// moneyFacts builds a manifest and entitlement as the admission hands them
// over: manifest numbers as json.Number, the price a string. hours is JSON
// number text (else it goes in as a string, which neither side reads).
func moneyFacts(price, hours string, nodes, perNode int64) (manifest, entitlement map[string]any) {
	manifest, entitlement = facts()
	set(manifest, "hardware", "nodes", json.Number(strconv.FormatInt(nodes, 10)))
	set(manifest, "hardware", "gpus_per_node", json.Number(strconv.FormatInt(perNode, 10)))
	set(manifest, "budget", "max_wall_clock_hours", jsonNumber(hours))
	entitlement["price_per_gpu_hour_usd"] = price
	return manifest, entitlement
}

// jsonNumber is s as a decoded JSON number (its text trimmed), or s itself
// when s is not exactly one JSON number.
func jsonNumber(s string) any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() { // not JSON, or more after the first value
		return s
	}
	if n, ok := v.(json.Number); ok {
		return n
	}
	return s
}

var bigMaxInt64 = new(big.Int).SetUint64(1<<63 - 1)

// exactCompute is the budget formula in big integers: W × centi-hours ×
// µUSD / 100 rounded up to 1 µUSD, then up to the cent (10,000 µUSD).
func exactCompute(w, centi, micro *big.Int) *big.Int {
	n := new(big.Int).Mul(w, centi)
	n.Mul(n, micro)
	n = ceilDivBig(n, big.NewInt(100))
	return n.Mul(ceilDivBig(n, big.NewInt(10_000)), big.NewInt(10_000))
}

func ceilDivBig(a, b *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// usdOf formats micro-USD that is a whole number of cents as lib.usd does.
func usdOf(micro *big.Int) string {
	cents := new(big.Int).Quo(micro, big.NewInt(10_000))
	d, c := new(big.Int).QuoRem(cents, big.NewInt(100), new(big.Int))
	return fmt.Sprintf("%s.%02d", d, c.Int64())
}

// bigOf is a defined integer Num as a big.Int (nil when undefined).
func bigOf(n regonum.Num) *big.Int {
	if !n.Defined() {
		return nil
	}
	i, ok := new(big.Int).SetString(n.String(), 10)
	if !ok {
		return nil
	}
	return i
}

func eqInt(a, b *big.Int) bool { return a != nil && b != nil && a.Cmp(b) == 0 }

func show(i *big.Int) string {
	if i == nil {
		return "undefined"
	}
	return i.String()
}

// maxCentiHours is ForCreate's bound: the longest run whose end fits a
// time.Duration.
const maxCentiHours = 256_204_778

// checkMoney asserts that Go and Rego agree on the same facts. Their readings
// of the hours may differ only in the three known ways TestMoneyGaps pins:
// Rego reads a fraction or an exponent through a float64 (Go refuses),
// Rego reads hours past ForCreate's bound (Go refuses), and Rego cannot read
// a fraction from 10^6 hours on (Go can). Anything else, and any Rego value
// that differs from Go's or from exact arithmetic, fails.
func checkMoney(t *testing.T, q rego.PreparedEvalQuery, price, hours string, nodes, perNode int64) {
	t.Helper()
	m, e := moneyFacts(price, hours, nodes, perNode)
	r := evalMoney(t, q, m, e)

	// lib.micro_usd ⇔ booking.MicroUSD
	goMicro, err := booking.MicroUSD(price)
	if (err == nil) != (r.microUSD != nil) || (err == nil && !eqInt(r.microUSD, big.NewInt(goMicro))) {
		t.Fatalf("price %q: Go MicroUSD %d, %v; Rego lib.micro_usd %s", price, goMicro, err, show(r.microUSD))
	}

	// the policy's money in Go (booking.Policy*, USD) is lib's: no gap at all
	var c regonum.Calc
	if got := booking.PolicyMicroUSD(price); show(bigOf(got)) != show(r.microUSD) {
		t.Fatalf("price %q: PolicyMicroUSD %s, Rego lib.micro_usd %s", price, got, show(r.microUSD))
	}
	if got := booking.PolicyCenti(jsonNumber(hours)); show(bigOf(got)) != show(r.centi) {
		t.Fatalf("hours %q: PolicyCenti %s, Rego lib.centi %s", hours, got, show(r.centi))
	}
	if got := booking.CeilCent(&c, booking.PolicyMicroUSD(price)); show(bigOf(got)) != show(r.ceilCent) {
		t.Fatalf("price %q: CeilCent %s, Rego lib.ceil_cent %s", price, got, show(r.ceilCent))
	}
	if got, ok := booking.USD(&c, booking.PolicyMicroUSD(price)); ok != (r.usd != nil) || (ok && got != *r.usd) {
		t.Fatalf("price %q: USD %q %v, Rego lib.usd %v", price, got, ok, strOrUndefined(r.usd))
	}
	if r.compute != nil {
		if got, ok := booking.USD(&c, regonum.Text(r.compute.String())); !ok || r.computeUSD == nil || got != *r.computeUSD {
			t.Fatalf("compute %s: USD %q, Rego lib.usd %v", r.compute, got, strOrUndefined(r.computeUSD))
		}
	}
	if c.Err != nil {
		t.Fatalf("price %q hours %q: %v", price, hours, c.Err)
	}

	// lib.ceil_cent and lib.usd ⇔ ForCreate's rounding: 1 GPU × 1 h × price
	// is the price itself, rounded up to the cent.
	if err == nil {
		m, e := moneyFacts(price, "1", 1, 1)
		run, err := booking.ForCreate(m, e, now)
		if err != nil {
			t.Fatalf("price %q: ForCreate for one GPU-hour: %v", price, err)
		}
		want := big.NewInt(run.ComputeMicroUSD)
		if !eqInt(r.ceilCent, want) || r.usd == nil || *r.usd != usdOf(want) {
			t.Fatalf("price %q: Go rounds %d µUSD to %d (%s); Rego lib.ceil_cent %s, lib.usd %v",
				price, goMicro, run.ComputeMicroUSD, usdOf(want), show(r.ceilCent), strOrUndefined(r.usd))
		}
	} else if r.ceilCent != nil || r.usd != nil {
		t.Fatalf("price %q: Rego rounds an undefined amount", price)
	}

	// lib.centi ⇔ ForCreate's hours, read back from End (36 s per centi-hour)
	m, e = moneyFacts("0", hours, 1, 1)
	run, err := booking.ForCreate(m, e, now)
	var goCenti *big.Int
	if err == nil {
		d := run.End.Sub(now)
		if d <= 0 || d%(36*time.Second) != 0 {
			t.Fatalf("hours %q: End - now = %v, not a positive whole number of centi-hours", hours, d)
		}
		goCenti = big.NewInt(int64(d / (36 * time.Second)))
	}
	text := fmt.Sprint(jsonNumber(hours))
	switch {
	case eqInt(r.centi, goCenti):
		// both read the same centi-hours
	case goCenti == nil && (r.centi == nil || r.centi.Sign() <= 0):
		// both refuse: ForCreate (and the budget gate's _has_hours) need a positive number
	case goCenti == nil && strings.ContainsAny(text, ".eE") && eqInt(r.centi, floatCenti(text)):
		// known: lib.centi reads a number with a fraction or an exponent as
		// the float64 nearest to it (6.500, 1e2); Go only 2-decimal text
	case goCenti == nil && r.centi.Cmp(big.NewInt(maxCentiHours)) > 0:
		// known: Go bounds the run's end to a time.Duration, Rego reads 12 integer digits
	case r.centi == nil && strings.ContainsAny(text, ".eE") && floatCenti(text) == nil:
		// known: that float64 prints with an exponent from 10^6 hours on,
		// which lib.scaled refuses (1000000.5)
	default:
		t.Fatalf("hours %q: Go reads %s centi-hours (%v); Rego lib.centi %s", hours, show(goCenti), err, show(r.centi))
	}

	// budget's booked_compute_micro_usd ⇔ ForCreate's ComputeMicroUSD. Rego's value,
	// when defined, is the exact formula over its own readings; Go's is the
	// same number whenever Go computes one.
	m, e = moneyFacts(price, hours, nodes, perNode)
	run, goErr := booking.ForCreate(m, e, now)
	var exact *big.Int
	if r.microUSD != nil && r.centi != nil && nodes >= 1 && perNode >= 1 {
		exact = exactCompute(new(big.Int).Mul(big.NewInt(nodes), big.NewInt(perNode)), r.centi, r.microUSD)
	}
	if r.compute != nil && !eqInt(r.compute, exact) {
		t.Fatalf("facts %q %q %d×%d: Rego compute %s, exact %s", price, hours, nodes, perNode, r.compute, show(exact))
	}
	if r.compute != nil && (r.computeUSD == nil || *r.computeUSD != usdOf(r.compute)) {
		t.Fatalf("facts %q %q %d×%d: Rego lib.usd(%s) = %v, want %s", price, hours, nodes, perNode, r.compute, strOrUndefined(r.computeUSD), usdOf(r.compute))
	}
	switch {
	case goErr == nil && r.centi != nil: // (Go reads hours Rego cannot: checked above)
		if !eqInt(r.compute, big.NewInt(run.ComputeMicroUSD)) || run.GPUs != int(nodes*perNode) {
			t.Fatalf("facts %q %q %d×%d: Go %d µUSD for %d GPUs; Rego compute %s",
				price, hours, nodes, perNode, run.ComputeMicroUSD, run.GPUs, show(r.compute))
		}
	case exact != nil && goCenti != nil && nodes <= 1<<20 && perNode <= 1<<20:
		// Go read every fact: it refuses only a cost past int64, where Rego
		// may give the exact value or nothing.
		if exact.Cmp(bigMaxInt64) <= 0 || !strings.HasSuffix(goErr.Error(), "compute cost out of range: booking facts invalid") {
			t.Fatalf("facts %q %q %d×%d: Go refuses (%v) a cost of %s", price, hours, nodes, perNode, goErr, exact)
		}
	}
}

// floatCenti is what lib.centi makes of number text that has a fraction or
// an exponent: OPA's sprintf("%v") formats it as a float64, and lib.scaled
// reads that text when it is a plain decimal with at most 2 places.
func floatCenti(text string) *big.Int {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil
	}
	m := regoCenti.FindStringSubmatch(fmt.Sprintf("%v", f))
	if m == nil {
		return nil
	}
	c, _ := new(big.Int).SetString(m[1]+(m[2] + "00")[:2], 10)
	return c
}

// regoCenti is lib.scaled's pattern for 2 places.
var regoCenti = regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,2}))?$`)

func strOrUndefined(s *string) string {
	if s == nil {
		return "undefined"
	}
	return strconv.Quote(*s)
}

// moneySeeds are the differential's table and the fuzz seed corpus:
// price (a USD string), hours (JSON number text), nodes, GPUs per node.
var moneySeeds = []struct {
	price, hours   string
	nodes, perNode int64
}{
	{"2.49", "12.25", 2, 8},
	{"2.49", "16", 3, 1},
	{"0", "1", 1, 1},
	{"0.000001", "0.01", 1, 1},
	{"0.010001", "1", 1, 1},
	{"0.05", "6.5", 8, 8},
	{"0.99", "0.01", 1, 1},
	{"999999999999.999999", "1", 9, 1},                   // the largest cost that fits int64
	{"999999999999.999999", "1", 10, 1},                  // past int64
	{"999999999999.999999", "2562047", 1 << 20, 1 << 20}, // past 2^120: Rego's division may give up
	{"999999999999.999999", "999999999999", 1 << 62, 1 << 62},
	{"999999999999.999999", "2562047.78", 1, 1}, // the longest run Go reads; Rego cannot
	{"123456789012", "8760", 1 << 20, 1 << 20},
	{"1.5", "8760", 1<<20 + 1, 1}, // Go's count bound
	{"1.5", "2562047.79", 1, 1},   // Go's hours bound
	{"1.5", "2562048", 1, 1},
	{"1.5", "1000000.5", 1, 1},
	{"1.5", "999999.99", 1, 1},
	{"1.5", "1e6", 1, 1},
	{"1.5", "999999999.99", 1, 1},
	{"1.5", "1000000000", 1, 1},
	{"1.5", "123456789012.99", 1, 1},
	{"1.5", "1234567890123", 1, 1},
	{"1.5", "6.500", 2, 4}, // Rego reads 6.5 through a float64
	{"1.5", "1e2", 2, 4},
	{"1.5", "1E2", 2, 4},
	{"1.5", "0.1e1", 2, 4},
	{"1.5", "6.0000000000000000001", 2, 4},
	{"1.5", "6.125", 2, 4},
	{"1.5", "0.005", 2, 4},
	{"1.5", "1e21", 2, 4},
	{"1.5", "1e-2", 2, 4},
	{"1.5", "1.0", 2, 4},
	{"1.5", "0", 2, 4},
	{"1.5", "0.00", 2, 4},
	{"1.5", "-0", 2, 4},
	{"1.5", "-0.0", 2, 4},
	{"1.5", "-6", 2, 4},
	{"1.5", "9223372036854775808", 2, 4},
	{"1.5", " 6 ", 2, 4},
	{"1.5", "06", 2, 4},
	{"1.5", `"6"`, 2, 4},
	{"1.5", "6 7", 2, 4},
	{"1.5", "", 2, 4},
	{"1.5", "6", 0, 4},
	{"1.5", "6", -1, 4},
	{"1.5", "6", 4, -9223372036854775808},
	{"", "6", 1, 1},
	{"-1", "6", 1, 1},
	{"+1", "6", 1, 1},
	{"-0", "6", 1, 1},
	{"01", "6", 1, 1},
	{"1.", "6", 1, 1},
	{".5", "6", 1, 1},
	{"1e3", "6", 1, 1},
	{"2.4900001", "6", 1, 1},
	{"1000000000000", "6", 1, 1},
	{"123456789012", "6", 1, 1},
	{" 1", "6", 1, 1},
	{"1\n", "6", 1, 1},
	{"1,000", "6", 1, 1},
	{"NaN", "6", 1, 1},
	{"١", "6", 1, 1},
	{"\xff1", "6", 1, 1},
}

// FuzzMoneyMatchesRego: for the same price, hours and GPU counts, Go's
// booking (MicroUSD, ForCreate's hours, rounding and compute cost) and the
// Rego helpers (lib.micro_usd, lib.centi, lib.ceil_cent, lib.usd and
// budget's booked_compute_micro_usd) are both defined with the same integer, or both
// undefined, but for the known gaps checkMoney names.
func FuzzMoneyMatchesRego(f *testing.F) {
	for _, s := range moneySeeds {
		f.Add(s.price, s.hours, s.nodes, s.perNode)
	}
	q := prepareMoney(f)
	f.Fuzz(func(t *testing.T, price, hours string, nodes, perNode int64) {
		checkMoney(t, q, price, hours, nodes, perNode)
	})
}

// TestMoneyGaps pins the gaps checkMoney allows. The first ones are
// schema-valid manifests the budget gate reads and ForCreate refuses: the
// policy may admit a run the ledger then refuses at commit
// (CodeBookingFactsInvalid). Go is the stricter side, so they fail closed.
// The last ones are hours past the schema's 8760.
func TestMoneyGaps(t *testing.T) {
	q := prepareMoney(t)
	for _, tc := range []struct {
		name, hours, nodes string
		centi, compute     int64 // Rego's, -1 when undefined; µUSD at 1.5 USD per GPU-hour
		goRefuses          bool
	}{
		// lib.centi formats a number with a fraction or an exponent as a
		// float64 ("%v"): it reads 6.500 and 1e2, and 6.0000000000000000001 as 6
		{"trailing zero", "6.500", "2", 650, 19_500_000, true},
		{"exponent", "1e2", "2", 10_000, 300_000_000, true},
		{"digits a float64 drops", "6.0000000000000000001", "2", 600, 18_000_000, true},
		// lib.is_count reads 2.0 and 2e0 as 2; ForCreate reads integer text only
		{"integral count with a decimal point", "1", "2.0", 100, 3_000_000, true},
		{"integral count with an exponent", "1", "2e0", 100, 3_000_000, true},
		// lib.scaled reads 12 integer digits; ForCreate bounds the end to a time.Duration
		{"past ForCreate's bound", "2562048", "1", 256_204_800, 3_843_072_000_000, true},
		// from 10^6 on, "%v" of a float64 has an exponent, which lib.scaled refuses
		{"a fraction from a million hours", "1000000.5", "1", -1, -1, false},
		{"the longest run Go reads", "2562047.78", "1", -1, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, e := facts()
			set(m, "hardware", "nodes", json.Number(tc.nodes))
			set(m, "hardware", "gpus_per_node", json.Number("1"))
			set(m, "budget", "max_wall_clock_hours", json.Number(tc.hours))
			e["price_per_gpu_hour_usd"] = "1.5"
			r := evalMoney(t, q, m, e)
			want := func(n int64) *big.Int {
				if n < 0 {
					return nil
				}
				return big.NewInt(n)
			}
			if show(r.centi) != show(want(tc.centi)) || show(r.compute) != show(want(tc.compute)) {
				t.Fatalf("Rego centi %s, compute %s; want %s, %s", show(r.centi), show(r.compute), show(want(tc.centi)), show(want(tc.compute)))
			}
			if _, err := booking.ForCreate(m, e, now); errors.Is(err, booking.ErrFacts) != tc.goRefuses {
				t.Fatalf("ForCreate: %v, want refused %v", err, tc.goRefuses)
			}
		})
	}
}
