package booking

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/itocompute/itogate/internal/regonum"
	"github.com/open-policy-agent/opa/v1/util"
)

// The policy's money (policies/ito/lib: micro_usd, centi, ceil_div,
// div_floor, ceil_cent, usd, centi_string), computed in Go with OPA's number
// semantics (internal/regonum) so that every amount is byte-identical to
// the Rego helpers' on any input, including where they are undefined. The
// training facts (gatekeeper/trainfacts) price a run with these; ForCreate
// above is the ledger's stricter reading of the same facts.

// twoTo63 is the bound below which lib.ceil_div and lib.div_floor divide
// through one exact float (the dividend fits 64 bits of mantissa).
var twoTo63 = regonum.Const("9223372036854775808")

var policyScaled = [7]*regexp.Regexp{
	1: regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,1}))?$`),
	2: regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,2}))?$`),
	6: regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,6}))?$`),
}

// scaled is lib.scaled(s, places): the exact integer s × 10^places of a
// plain decimal string, undefined otherwise.
func scaled(s string, places int) regonum.Num {
	m := policyScaled[places].FindStringSubmatch(s)
	if m == nil {
		return regonum.Num{}
	}
	whole, _ := strconv.ParseInt(m[1], 10, 64)
	frac, _ := strconv.ParseInt((m[2] + "000000")[:places], 10, 64)
	unit := int64(1)
	for range places {
		unit *= 10
	}
	return regonum.Int(whole*unit + frac)
}

// PolicyMicroUSD is lib.micro_usd(v): exact micro-USD of a plain decimal USD
// string ("2.49" → 2490000), undefined for anything else.
func PolicyMicroUSD(v any) regonum.Num {
	s, ok := v.(string)
	if !ok {
		return regonum.Num{}
	}
	return scaled(s, 6)
}

// PolicyCenti is lib.centi(v): exact hundredths of a JSON number with at
// most 2 decimals, read from its sprintf("%v") text as OPA formats it (a
// fraction or an exponent through a float64), undefined otherwise.
func PolicyCenti(v any) regonum.Num {
	n, ok := regonum.Of(v)
	if !ok {
		return regonum.Num{}
	}
	return scaled(fmt.Sprintf("%v", sprintfArg(n)), 2)
}

// sprintfArg is the Go value OPA's sprintf formats a number as.
func sprintfArg(n regonum.Num) any {
	s := n.String()
	if strings.ContainsAny(s, ".eE") {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
		return s
	}
	if i, ok := util.Atoi64(s); ok {
		return i
	}
	if b, ok := new(big.Int).SetString(s, 10); ok {
		return b
	}
	return s
}

// CeilDiv is lib.ceil_div(a, b): ceil(a / b) for integers.
func CeilDiv(c *regonum.Calc, a, b regonum.Num) regonum.Num {
	n := c.Sub(c.Add(a, b), regonum.Int(1))
	if regonum.Less(n, twoTo63) {
		return c.Div(c.Sub(n, c.Rem(n, b)), b)
	}
	return DivFloor(c, c.Sub(c.Add(a, b), regonum.Int(1)), b)
}

// DivFloor is lib.div_floor(a, b): floor(a / b), exact while a float
// estimate refined twice lands within one of it, undefined beyond.
func DivFloor(c *regonum.Calc, a, b regonum.Num) regonum.Num {
	if !a.Defined() || !b.Defined() {
		return regonum.Num{}
	}
	if regonum.Less(a, twoTo63) {
		return c.Div(c.Sub(a, c.Rem(a, b)), b)
	}
	refine := func(q regonum.Num) regonum.Num {
		return c.Add(q, regonum.Floor(c.Div(c.Sub(a, c.Mul(q, b)), b)))
	}
	q := refine(refine(regonum.Floor(c.Div(a, b))))
	r := c.Sub(a, c.Mul(q, b))
	var step regonum.Num
	switch {
	case regonum.GreaterEq(r, regonum.Int(0)) && regonum.Less(r, b):
		step = regonum.Int(0)
	case regonum.Less(r, regonum.Int(0)) && regonum.GreaterEq(r, c.Sub(regonum.Int(0), b)):
		step = regonum.Int(-1)
	case regonum.GreaterEq(r, b) && regonum.Less(r, c.Mul(regonum.Int(2), b)):
		step = regonum.Int(1)
	}
	return c.Add(q, step)
}

// CeilCent is lib.ceil_cent(micro): micro-USD rounded up to the cent.
func CeilCent(c *regonum.Calc, micro regonum.Num) regonum.Num {
	return c.Mul(CeilDiv(c, micro, regonum.Int(10000)), regonum.Int(10000))
}

// USD is lib.usd(micro): "1.24" for 1234567 micro-USD, rounded up.
func USD(c *regonum.Calc, micro regonum.Num) (string, bool) {
	return CentiString(c, CeilDiv(c, micro, regonum.Int(10000)))
}

// CentiString is lib.centi_string(n): 650 → "6.50".
func CentiString(c *regonum.Calc, n regonum.Num) (string, bool) {
	if !n.Defined() {
		return "", false
	}
	hundred := regonum.Int(100)
	var whole, r regonum.Num
	if regonum.Less(n, twoTo63) {
		r = c.Rem(n, hundred)
		whole = c.Div(c.Sub(n, r), hundred)
	} else {
		whole = DivFloor(c, n, hundred)
		r = c.Rem(n, hundred)
	}
	if !whole.Defined() || !r.Defined() {
		return "", false
	}
	return fmt.Sprintf("%d.%02d", sprintfArg(whole), sprintfArg(r)), true
}
