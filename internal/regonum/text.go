package regonum

import (
	"math/big"
	"strconv"
	"sync"
)

// floatText is f.Text('g', -1) for a finite, non-integer f of 64 bits of
// mantissa, computed as math/big computes it (roundShortest and %g in
// math/big/ftoa.go) but with the exact decimal digits of f and of the
// bounds half an ulp away taken from one big.Int product (2M × 5^k for
// 2M × 2^-k) and decimal additions, instead of three decimal shifts.
// TestFloatText holds it to Text on random values; any other float falls
// back to Text.
func floatText(f *big.Float) string {
	if f.Prec() != 64 || f.IsInf() || f.Sign() == 0 {
		return f.Text('g', -1)
	}
	s := textPool.Get().(*textScratch)
	defer textPool.Put(s)
	// f = ±M × 2^(E-64), M of exactly 64 bits
	E := f.MantExp(nil)
	t := &s.t
	t.SetMantExp(f, 64-E)
	t.Abs(t)
	M, acc := t.Uint64()
	shift := E - 64 - 1 // lsb of 2M ± 1 is half an ulp
	if acc != big.Exact || M>>63 != 1 || shift >= 0 {
		return f.Text('g', -1)
	}
	k := -shift
	p5, p5digits := pow5(k)
	// the exact decimal digits of 2M × 5^k and of 5^k: lower and upper
	// are (2M ∓ 1) × 5^k, their difference and sum
	v := &s.v
	v.SetUint64(M)
	v.Lsh(v, 1)
	v.Mul(v, p5)
	vd := v.Append(s.vd[:0], 10)
	s.vd = vd
	s.lo = decSub(s.lo, vd, p5digits)
	s.hi = decAdd(s.hi, vd, p5digits)
	lo, hi := s.lo, s.hi
	d := decimalOf(vd, k)
	lower := decimalOf(lo, k)
	upper := decimalOf(hi, k)
	inclusive := M&1 == 0

	for i, m := range d.mant {
		l := lower.at(i)
		u := upper.at(i)
		okdown := l != m || inclusive && i+1 == len(lower.mant)
		okup := m != u && (inclusive || m+1 < u || i+1 < len(upper.mant))
		switch {
		case okdown && okup:
			d.round(i + 1)
		case okdown:
			d.roundDown(i + 1)
		case okup:
			d.roundUp(i + 1)
		default:
			continue
		}
		break
	}

	buf := s.buf[:0]
	if f.Signbit() {
		buf = append(buf, '-')
	}
	prec := len(d.mant)
	if exp := d.exp - 1; exp < -4 || exp >= 6 {
		buf = fmtE(buf, prec-1, d)
	} else {
		buf = fmtF(buf, max(prec-d.exp, 0), d)
	}
	s.buf = buf
	return string(buf)
}

// textScratch is floatText's working space, reused through textPool: the
// digits are written into it and only the final text is copied out.
type textScratch struct {
	t               big.Float
	v               big.Int
	vd, lo, hi, buf []byte
}

var textPool = sync.Pool{New: func() any { return new(textScratch) }}

// grow is buf with length n, reusing its space when it has room.
func grow(buf []byte, n int) []byte {
	if cap(buf) < n {
		return make([]byte, n, n+8)
	}
	return buf[:n]
}

// decSub is a − b of decimal digit strings, a > b > 0 (no leading zeros in
// the result), written into dst's space.
func decSub(dst, a, b []byte) []byte {
	out := grow(dst, len(a))
	borrow := byte(0)
	for i, j := len(a)-1, len(b)-1; i >= 0; i, j = i-1, j-1 {
		x := a[i] - '0'
		y := borrow
		if j >= 0 {
			y += b[j] - '0'
		}
		if x < y {
			x += 10
			borrow = 1
		} else {
			borrow = 0
		}
		out[i] = x - y + '0'
	}
	i := 0
	for i < len(out)-1 && out[i] == '0' {
		i++
	}
	return out[i:]
}

// decAdd is a + b of decimal digit strings, written into dst's space.
func decAdd(dst, a, b []byte) []byte {
	n := max(len(a), len(b)) + 1
	out := grow(dst, n)
	carry := byte(0)
	for i, j, o := len(a)-1, len(b)-1, n-1; o >= 0; i, j, o = i-1, j-1, o-1 {
		x := carry
		if i >= 0 {
			x += a[i] - '0'
		}
		if j >= 0 {
			x += b[j] - '0'
		}
		carry = x / 10
		out[o] = x%10 + '0'
	}
	if out[0] == '0' {
		return out[1:]
	}
	return out
}

var bigOne = big.NewInt(1)

type power5 struct {
	n      *big.Int
	digits []byte
}

var pow5s sync.Map // int → power5

// pow5 is 5^k and its decimal digits (shared: never modified).
func pow5(k int) (*big.Int, []byte) {
	if p, ok := pow5s.Load(k); ok {
		return p.(power5).n, p.(power5).digits
	}
	n := new(big.Int).Exp(big.NewInt(5), big.NewInt(int64(k)), nil)
	p := power5{n: n, digits: n.Append(nil, 10)}
	pow5s.Store(k, p)
	return p.n, p.digits
}

// decimal is math/big's: the digits of 0.mant × 10^exp, no trailing zeros.
type decimal struct {
	mant []byte
	exp  int
}

// decimalOf is the decimal of the integer with digits s × 10^-k.
func decimalOf(s []byte, k int) decimal {
	d := decimal{mant: s, exp: len(s) - k}
	trim(&d)
	return d
}

func (x *decimal) at(i int) byte {
	if 0 <= i && i < len(x.mant) {
		return x.mant[i]
	}
	return '0'
}

func shouldRoundUp(x *decimal, n int) bool {
	if x.mant[n] == '5' && n+1 == len(x.mant) {
		return n > 0 && (x.mant[n-1]-'0')&1 != 0
	}
	return x.mant[n] >= '5'
}

func (x *decimal) round(n int) {
	if n < 0 || n >= len(x.mant) {
		return
	}
	if shouldRoundUp(x, n) {
		x.roundUp(n)
	} else {
		x.roundDown(n)
	}
}

func (x *decimal) roundUp(n int) {
	if n < 0 || n >= len(x.mant) {
		return
	}
	for n > 0 && x.mant[n-1] >= '9' {
		n--
	}
	if n == 0 {
		x.mant[0] = '1'
		x.mant = x.mant[:1]
		x.exp++
		return
	}
	x.mant[n-1]++
	x.mant = x.mant[:n]
}

func (x *decimal) roundDown(n int) {
	if n < 0 || n >= len(x.mant) {
		return
	}
	x.mant = x.mant[:n]
	trim(x)
}

func trim(x *decimal) {
	i := len(x.mant)
	for i > 0 && x.mant[i-1] == '0' {
		i--
	}
	x.mant = x.mant[:i]
	if i == 0 {
		x.exp = 0
	}
}

func fmtE(buf []byte, prec int, d decimal) []byte {
	ch := byte('0')
	if len(d.mant) > 0 {
		ch = d.mant[0]
	}
	buf = append(buf, ch)
	if prec > 0 {
		buf = append(buf, '.')
		i := 1
		m := min(len(d.mant), prec+1)
		if i < m {
			buf = append(buf, d.mant[i:m]...)
			i = m
		}
		for ; i <= prec; i++ {
			buf = append(buf, '0')
		}
	}
	buf = append(buf, 'e')
	var exp int64
	if len(d.mant) > 0 {
		exp = int64(d.exp) - 1
	}
	if exp < 0 {
		ch = '-'
		exp = -exp
	} else {
		ch = '+'
	}
	buf = append(buf, ch)
	if exp < 10 {
		buf = append(buf, '0')
	}
	return strconv.AppendInt(buf, exp, 10)
}

func fmtF(buf []byte, prec int, d decimal) []byte {
	if d.exp > 0 {
		m := min(len(d.mant), d.exp)
		buf = append(buf, d.mant[:m]...)
		for ; m < d.exp; m++ {
			buf = append(buf, '0')
		}
	} else {
		buf = append(buf, '0')
	}
	if prec > 0 {
		buf = append(buf, '.')
		for i := 0; i < prec; i++ {
			buf = append(buf, d.at(d.exp+i))
		}
	}
	return buf
}
