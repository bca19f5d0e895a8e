package regonum

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

// TestMatchesOPA evaluates every operation in OPA (strict built-in errors,
// as the server evaluates) and in Go on random operands, feeding each
// result into the next operation so that carried floats, integers that came
// out of floats and big integers are all exercised; the texts (and errors)
// must be identical.
func TestMatchesOPA(t *testing.T) {
	ops := []struct {
		rego string
		goOp func(c *Calc, x, y Num) Num
	}{
		{"input.x + input.y", (*Calc).Add},
		{"input.x - input.y", (*Calc).Sub},
		{"input.x * input.y", (*Calc).Mul},
		{"input.x / input.y", (*Calc).Div},
		{"input.x % input.y", (*Calc).Rem},
		{"ceil(input.x)", func(_ *Calc, x, _ Num) Num { return Ceil(x) }},
		{"floor(input.x)", func(_ *Calc, x, _ Num) Num { return Floor(x) }},
		{"round(input.x)", func(_ *Calc, x, _ Num) Num { return Round(x) }},
		{"max([input.x, input.y])", func(_ *Calc, x, y Num) Num { return Max(x, y) }},
		{"min([input.x, input.y])", func(_ *Calc, x, y Num) Num { return Min(x, y) }},
	}
	ctx := context.Background()
	queries := make([]rego.PreparedEvalQuery, len(ops))
	for i, op := range ops {
		q, err := rego.New(rego.Query("r := "+op.rego), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
		if err != nil {
			t.Fatal(err)
		}
		queries[i] = q
	}
	less, err := rego.New(rego.Query("r := [input.x < input.y, input.x == input.y]"), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seeds := []string{"0", "1", "2", "3", "7", "8", "12", "16", "100", "1e9", "1e12", "0.4", "0.7", "0.95", "1.5",
		"2.5", "6.125", "1.0", "8.0", "1e3", "1E2", "0.1", "3.3333333333333333", "2147483647", "2147483648",
		"-2147483648", "-3", "8030261248", "405853388800", "9223372036854775807", "9223372036854775808",
		"123456789012345678901234567890", "1073741824", "1e-3", "4.5e6", "0.16", "12.5", "50676", "-0.5"}
	rng := rand.New(rand.NewPCG(3, 2026))
	pick := func(pool []Num) Num {
		if rng.IntN(3) == 0 || len(pool) == 0 {
			return Text(seeds[rng.IntN(len(seeds))])
		}
		return pool[rng.IntN(len(pool))]
	}
	var pool []Num
	checked, floats := 0, 0
	n := 6000
	if testing.Short() {
		n = 600
	}
	for range n {
		i := rng.IntN(len(ops))
		x, y := pick(pool), pick(pool)
		var c Calc
		got := ops[i].goOp(&c, x, y)
		rs, err := queries[i].Eval(ctx, rego.EvalInput(map[string]any{"x": json.Number(x.String()), "y": json.Number(y.String())}))
		switch {
		case err != nil:
			if c.Err == nil || !strings.Contains(err.Error(), c.Err.Error()) {
				t.Fatalf("%s with x=%s y=%s: OPA error %v, Go %v (%s)", ops[i].rego, x, y, err, c.Err, got)
			}
			continue
		case c.Err != nil:
			t.Fatalf("%s with x=%s y=%s: Go error %v, OPA %v", ops[i].rego, x, y, c.Err, rs)
		}
		want := fmt.Sprint(rs[0].Bindings["r"])
		if got.String() != want {
			t.Fatalf("%s with x=%s y=%s: Go %s, OPA %s", ops[i].rego, x, y, got, want)
		}
		checked++
		if got.kind == isFloat {
			floats++
		}
		if len(pool) < 400 {
			pool = append(pool, got)
		} else {
			pool[rng.IntN(len(pool))] = got
		}
		// comparisons on the same operands
		rs, err = less.Eval(ctx, rego.EvalInput(map[string]any{"x": json.Number(x.String()), "y": json.Number(y.String())}))
		if err != nil {
			t.Fatal(err)
		}
		cmp := rs[0].Bindings["r"].([]any)
		if cmp[0] != Less(x, y) || cmp[1] != Equal(x, y) {
			t.Fatalf("compare x=%s y=%s: Go less %v equal %v, OPA %v", x, y, Less(x, y), Equal(x, y), cmp)
		}
	}
	if checked < n/2 || floats < n/10 {
		t.Fatalf("only %d of %d operations had a result", checked, n)
	}
	t.Logf("%d operations, %d with a result, %d of them non-integer floats", n, checked, floats)
}

func TestUndefined(t *testing.T) {
	var c Calc
	if c.Add(Num{}, Int(1)).Defined() || Max(Int(1), Num{}).Defined() || Ceil(Num{}).Defined() || Less(Num{}, Int(1)) {
		t.Fatal("an operation on an undefined number is defined")
	}
	if c.Err != nil {
		t.Fatal(c.Err)
	}
	c.Div(Int(1), Int(0))
	if c.Err != ErrDivideByZero || c.Add(Int(1), Int(2)).Defined() {
		t.Fatalf("after an error: %v", c.Err)
	}
}
