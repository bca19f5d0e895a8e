package regonum

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestFloatText: floatText is big.Float.Text('g', -1) on random 64-bit
// floats of every magnitude the facts meet and beyond (2^-1100 to 2^62),
// halfway cases (an even and an odd mantissa) and OPA's own quotients.
func TestFloatText(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 2026))
	n := 300000
	if testing.Short() {
		n = 20000
	}
	check := func(f *big.Float) {
		t.Helper()
		if f.IsInt() {
			return
		}
		if got, want := floatText(f), f.Text('g', -1); got != want {
			t.Fatalf("%s (mantissa %s): floatText %s, Text %s", f.Text('p', 0), f.Text('b', 0), got, want)
		}
	}
	for i := range n {
		m := rng.Uint64() | 1<<63
		if i%3 == 0 {
			m &^= 1 // even mantissas: inclusive bounds
		}
		e := rng.IntN(1160) - 1100
		if i%2 == 0 {
			e = rng.IntN(130) - 120 // the facts' range
		}
		f := new(big.Float).SetPrec(64).SetMantExp(new(big.Float).SetPrec(64).SetUint64(m), e-64)
		if rng.IntN(5) == 0 {
			f.Neg(f)
		}
		check(f)
	}
	// quotients as OPA computes them
	for range n / 10 {
		a := new(big.Float).SetPrec(64).SetInt64(rng.Int64N(math.MaxInt32))
		b := new(big.Float).SetPrec(64).SetInt64(rng.Int64N(math.MaxInt32) + 1)
		check(new(big.Float).Quo(a, b))
	}
}

func BenchmarkFloatText(b *testing.B) {
	f := new(big.Float).Quo(new(big.Float).SetPrec(64).SetInt64(38562430976), new(big.Float).SetPrec(64).SetInt64(1000000000*7))
	b.Run("floatText", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			floatText(f)
		}
	})
	b.Run("Text", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Text('g', -1)
		}
	})
}
