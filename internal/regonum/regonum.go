// Package regonum computes with numbers exactly as OPA's evaluator does
// (topdown, the version go.mod pins), so that a figure computed in Go is
// byte-identical to the same formula evaluated in Rego.
//
// OPA keeps a number as its JSON text. An arithmetic built-in runs in the
// narrowest representation that holds both operands exactly: machine
// integers in the int32 window, then big.Int (for +, -, * and %), then
// big.Float at 64 bits of mantissa (the precision big.Float.SetString gives
// a text), rounding to nearest even; a float result that is an integer is
// written in full ('f' format) and is an integer from then on, any other
// float in the shortest form that reads back to the same 64-bit value.
// Division is exact only between int32-window integers that divide; every
// other quotient is a float. ceil, floor and round leave int32-window
// integers alone and go through a float otherwise. Comparison is exact on
// the texts (ast.NumberCompare).
//
// A Num is that text, or a float not yet written out (a non-integer float
// reads back to the same value, so the text is only built when asked for).
// The zero Num is undefined: every operation on it is undefined, as a Rego
// expression over an undefined value is. Errors (division or modulo by zero,
// modulo on a float) are the evaluator's strict built-in errors.
package regonum

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
	"github.com/open-policy-agent/opa/v1/util"
)

// Num is a number as OPA holds it, or undefined (the zero value). An
// integer whose text is its plain decimal form is kept as an int64 (kind
// isInt); any other text as text; a non-integer float result as the float.
type Num struct {
	text string
	f    *big.Float // a non-integer float result, text not built yet
	i    int64
	kind uint8
	// a text's readings, parsed once (Const): the float its text reads as,
	// and for an integer text beyond int64 the integer
	pf *big.Float
	pi *big.Int
}

const (
	isUndefined uint8 = iota
	isText
	isFloat
	isInt
)

// The evaluator's strict built-in errors.
var (
	ErrDivideByZero = errors.New("div: divide by zero")
	ErrModuloByZero = errors.New("rem: modulo by zero")
	ErrModuloFloat  = errors.New("rem: modulo on floating-point number")
)

const (
	minSmallInt = -1 << 31
	maxSmallInt = 1<<31 - 1
)

// Text is the number written t, as a Rego literal or a JSON number is.
func Text(t string) Num {
	if t == "" {
		return Num{}
	}
	return Num{text: t, kind: isText}
}

// Const is Text(t) with its readings parsed once, for a constant of the
// formulas or the bundle's data used in every decision.
func Const(t string) Num {
	n := Text(t)
	if !n.Defined() {
		return n
	}
	if _, ok := n.Int64(); ok {
		return n
	}
	n.pf = builtins.NumberToFloat(ast.Number(t))
	if i, err := builtins.NumberToInt(ast.Number(t)); err == nil {
		n.pi = i
	}
	return n
}

// Int is the integer i.
func Int(i int64) Num { return Num{i: i, kind: isInt} }

// Of reads v as the evaluator's input conversion does (ast.InterfaceToValue):
// json.Number keeps its text, int and int64 their decimal form, float64 its
// shortest form. ok is false for anything that is not a number.
func Of(v any) (n Num, ok bool) {
	switch x := v.(type) {
	case json.Number:
		return Text(string(x)), x != ""
	case ast.Number:
		return Text(string(x)), x != ""
	case int:
		return Int(int64(x)), true
	case int64:
		return Int(x), true
	case uint64:
		return Text(strconv.FormatUint(x, 10)), true
	case float64:
		return Text(strconv.FormatFloat(x, 'g', -1, 64)), true
	}
	return Num{}, false
}

// Defined reports whether n is a number (the zero Num is not).
func (n Num) Defined() bool { return n.kind != isUndefined }

// String is n's text as OPA writes it ("" when undefined).
func (n Num) String() string {
	switch n.kind {
	case isInt:
		return strconv.FormatInt(n.i, 10)
	case isFloat:
		return floatText(n.f)
	}
	return n.text
}

// JSON is n's text as a json.Number ("" when undefined).
func (n Num) JSON() json.Number { return json.Number(n.String()) }

// small is n as an int in the int32 window (OPA's smallInt: Atoi64 of the text).
func (n Num) small() (int64, bool) {
	i, ok := n.Int64()
	return i, ok && minSmallInt <= i && i <= maxSmallInt
}

// Int64 is n as an int64 when its text is one (as ast.Number.Int64).
func (n Num) Int64() (int64, bool) {
	switch n.kind {
	case isInt:
		return n.i, true
	case isText:
		return util.Atoi64(n.text)
	}
	return 0, false
}

func (n Num) bigInt() (*big.Int, bool) {
	switch n.kind {
	case isInt:
		return big.NewInt(n.i), true
	case isText:
		if i, ok := util.Atoi64(n.text); ok {
			return big.NewInt(i), true
		}
		if n.pi != nil {
			return n.pi, true
		}
		if n.pf != nil { // a Const that is no integer
			return nil, false
		}
		i, err := builtins.NumberToInt(ast.Number(n.text))
		return i, err == nil
	}
	return nil, false
}

func (n Num) float() *big.Float { return n.floatIn(nil) }

// floatIn is n's float; an integer is written into scratch when it is
// not nil (the result is then only valid until scratch is used again).
func (n Num) floatIn(scratch *big.Float) *big.Float {
	switch n.kind {
	case isFloat:
		return n.f
	case isInt:
		// exact at 64 bits, as SetString of its text gives it
		return intFloat(scratch, n.i)
	}
	if n.pf != nil {
		return n.pf
	}
	if i, ok := util.Atoi64(n.text); ok {
		return intFloat(scratch, i)
	}
	return builtins.NumberToFloat(ast.Number(n.text))
}

func intFloat(z *big.Float, i int64) *big.Float {
	if z == nil {
		z = new(big.Float)
	}
	return z.SetPrec(64).SetInt64(i)
}

var (
	maxExactInt = new(big.Float).SetInt64(1 << 62)
	minExactInt = new(big.Float).SetInt64(-1 << 62)
)

// fromFloat is the number OPA makes of a float result (builtins.FloatToNumber).
// An integer below 2^62 in magnitude has a unit in the last place of at
// most 1, so its shortest text is its exact decimal form: an int64.
func fromFloat(f *big.Float) Num { return fromFloatIn(f, false) }

// fromFloatIn is fromFloat of a result computed in scratch space: a
// non-integer result, which the Num keeps, is copied out of it first.
func fromFloatIn(f *big.Float, scratch bool) Num {
	if f.IsInt() {
		if f.Cmp(maxExactInt) < 0 && f.Cmp(minExactInt) > 0 {
			i, _ := f.Int64()
			if i == 0 && f.Signbit() {
				return Text("-0")
			}
			return Int(i)
		}
		return Text(f.Text('f', -1))
	}
	if scratch {
		f = new(big.Float).Copy(f) // the same precision, mode, accuracy and value
	}
	return Num{f: f, kind: isFloat}
}

// fromBig is an exact integer result.
func fromBig(r *big.Int) Num {
	if r.IsInt64() {
		return Int(r.Int64())
	}
	return Text(r.String())
}

type binary struct {
	small func(x, y int64) (int64, bool, error)
	// int64 is exact on any int64s, reporting false on overflow (then exact runs)
	int64   func(x, y int64) (int64, bool, error)
	exact   func(z, x, y *big.Int) (*big.Int, error)
	float   func(z, x, y *big.Float) (*big.Float, error)
	noFloat error
}

// eval is x op y. s holds scratch floats for the float path (nil: none):
// the operands read as floats and the result, which is copied out only
// when it is not an integer.
func (op binary) eval(s *scratch, x, y Num) (Num, error) {
	if !x.Defined() || !y.Defined() {
		return Num{}, nil
	}
	if a, ok := x.small(); ok {
		if b, ok := y.small(); ok {
			r, ok, err := op.small(a, b)
			if err != nil {
				return Num{}, err
			}
			if ok {
				return Int(r), nil
			}
		}
	}
	if op.exact != nil && op.int64 != nil {
		if a, ok := x.Int64(); ok {
			if b, ok := y.Int64(); ok {
				if r, ok, err := op.int64(a, b); err != nil {
					return Num{}, err
				} else if ok {
					return Int(r), nil
				}
			}
		}
	}
	if op.exact != nil {
		if a, ok := x.bigInt(); ok {
			if b, ok := y.bigInt(); ok {
				r, err := op.exact(new(big.Int), a, b)
				if err != nil {
					return Num{}, err
				}
				return fromBig(r), nil
			}
		}
	}
	if op.float == nil {
		return Num{}, op.noFloat
	}
	if s == nil {
		r, err := op.float(new(big.Float), x.float(), y.float())
		if err != nil {
			return Num{}, err
		}
		return fromFloat(r), nil
	}
	// a new float has precision 0 (the operands' larger one is taken) and
	// rounds to nearest even; the scratch result is set back to that
	s.z.SetPrec(0)
	r, err := op.float(&s.z, x.floatIn(&s.x), y.floatIn(&s.y))
	if err != nil {
		return Num{}, err
	}
	return fromFloatIn(r, true), nil
}

// scratch are a Calc's reusable floats.
type scratch struct {
	x, y, z big.Float
}

var (
	opAdd = binary{
		small: func(x, y int64) (int64, bool, error) { return x + y, true, nil },
		int64: func(x, y int64) (int64, bool, error) {
			r := x + y
			return r, (r > x) == (y > 0) || y == 0, nil
		},
		exact: func(z, x, y *big.Int) (*big.Int, error) { return z.Add(x, y), nil },
		float: func(z, x, y *big.Float) (*big.Float, error) { return z.Add(x, y), nil },
	}
	opSub = binary{
		small: func(x, y int64) (int64, bool, error) { return x - y, true, nil },
		int64: func(x, y int64) (int64, bool, error) {
			r := x - y
			return r, (r < x) == (y > 0) || y == 0, nil
		},
		exact: func(z, x, y *big.Int) (*big.Int, error) { return z.Sub(x, y), nil },
		float: func(z, x, y *big.Float) (*big.Float, error) { return z.Sub(x, y), nil },
	}
	opMul = binary{
		small: func(x, y int64) (int64, bool, error) { return x * y, true, nil },
		int64: func(x, y int64) (int64, bool, error) {
			if x == 0 || y == 0 {
				return 0, true, nil
			}
			r := x * y
			return r, r/y == x && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64), nil
		},
		exact: func(z, x, y *big.Int) (*big.Int, error) { return z.Mul(x, y), nil },
		float: func(z, x, y *big.Float) (*big.Float, error) { return z.Mul(x, y), nil },
	}
	opDiv = binary{
		small: func(x, y int64) (int64, bool, error) {
			if y == 0 {
				return 0, false, ErrDivideByZero
			}
			return x / y, x != 0 && x%y == 0, nil
		},
		float: func(z, x, y *big.Float) (*big.Float, error) {
			if i, acc := y.Int64(); acc == big.Exact && i == 0 {
				return nil, ErrDivideByZero
			}
			return z.Quo(x, y), nil
		},
	}
	opRem = binary{
		small: func(x, y int64) (int64, bool, error) {
			if y == 0 {
				return 0, false, ErrModuloByZero
			}
			return x % y, true, nil
		},
		int64: func(x, y int64) (int64, bool, error) {
			if y == 0 {
				return 0, false, ErrModuloByZero
			}
			if y == -1 {
				return 0, true, nil
			}
			return x % y, true, nil
		},
		exact: func(z, x, y *big.Int) (*big.Int, error) {
			if y.Sign() == 0 {
				return nil, ErrModuloByZero
			}
			return z.Rem(x, y), nil
		},
		noFloat: ErrModuloFloat,
	}
)

// unary is ceil, floor, round or abs: identity-like on int32-window
// integers, through a float otherwise.
func unary(x Num, small func(int64) int64, float func(*big.Float) *big.Float) Num {
	if !x.Defined() {
		return Num{}
	}
	if i, ok := x.small(); ok {
		return Int(small(i))
	}
	return fromFloat(float(x.float()))
}

func identity(i int64) int64 { return i }

var half = big.NewFloat(0.5)

// Ceil is OPA's ceil.
func Ceil(x Num) Num {
	return unary(x, identity, func(a *big.Float) *big.Float {
		i, _ := a.Int(nil)
		f := new(big.Float).SetInt(i)
		if f.Signbit() || a.Cmp(f) == 0 {
			return f
		}
		return new(big.Float).Add(f, big.NewFloat(1.0))
	})
}

// Floor is OPA's floor.
func Floor(x Num) Num {
	return unary(x, identity, func(a *big.Float) *big.Float {
		i, _ := a.Int(nil)
		f := new(big.Float).SetInt(i)
		if !f.Signbit() || a.Cmp(f) == 0 {
			return f
		}
		return new(big.Float).Sub(f, big.NewFloat(1.0))
	})
}

// Round is OPA's round (half away from zero).
func Round(x Num) Num {
	return unary(x, identity, func(a *big.Float) *big.Float {
		var i *big.Int
		if a.Signbit() {
			i, _ = new(big.Float).Sub(a, half).Int(nil)
		} else {
			i, _ = new(big.Float).Add(a, half).Int(nil)
		}
		return new(big.Float).SetInt(i)
	})
}

// Compare is OPA's order of two defined numbers (ast.NumberCompare, on
// their texts). Fast paths that give the same order: two int64s; two floats
// (of the same precision, their shortest texts order alike); a float and
// an int64 (the int is exact at 64 bits, so it cannot lie between the float
// and the float's shortest text, which rounds to the float).
func Compare(x, y Num) int {
	xi, xInt := x.Int64()
	yi, yInt := y.Int64()
	switch {
	case xInt && yInt:
		return cmpInt(xi, yi)
	case x.kind == isFloat && y.kind == isFloat:
		return x.f.Cmp(y.f)
	case x.kind == isFloat && yInt:
		return cmpFloatInt(x.f, yi)
	case xInt && y.kind == isFloat:
		return -cmpFloatInt(y.f, xi)
	case xInt && y.pi != nil:
		return big.NewInt(xi).Cmp(y.pi)
	case x.pi != nil && yInt:
		return x.pi.Cmp(big.NewInt(yi))
	}
	return ast.NumberCompare(ast.Number(x.String()), ast.Number(y.String()))
}

// cmpFloatInt is f.Cmp(i as a float), without making the float: the
// truncated integer t of f and which side of f it lies on order them.
func cmpFloatInt(f *big.Float, i int64) int {
	t, acc := f.Int64()
	switch acc {
	case big.Exact:
		return cmpInt(t, i)
	case big.Below: // t < f: t < f < t+1, or f beyond the int64s above
		if i <= t {
			return 1
		}
		return -1
	default: // t > f: t-1 < f < t, or f beyond the int64s below
		if i >= t {
			return -1
		}
		return 1
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Calc evaluates formulas and keeps the first strict built-in error, as
// OPA stops at it; every result after an error is undefined.
type Calc struct {
	Err error
	s   scratch
}

func (c *Calc) bin(op binary, x, y Num) Num {
	if c.Err != nil {
		return Num{}
	}
	r, err := op.eval(&c.s, x, y)
	if err != nil {
		c.Err = err
		return Num{}
	}
	return r
}

// Add is x + y.
func (c *Calc) Add(x, y Num) Num { return c.bin(opAdd, x, y) }

// Sub is x - y.
func (c *Calc) Sub(x, y Num) Num { return c.bin(opSub, x, y) }

// Mul is x * y.
func (c *Calc) Mul(x, y Num) Num { return c.bin(opMul, x, y) }

// Div is x / y.
func (c *Calc) Div(x, y Num) Num { return c.bin(opDiv, x, y) }

// Rem is x % y.
func (c *Calc) Rem(x, y Num) Num { return c.bin(opRem, x, y) }

// Max is max([xs...]) of an array: undefined when any element is (the
// array is), else the last of the largest.
func Max(xs ...Num) Num {
	var m Num
	for i, x := range xs {
		if !x.Defined() {
			return Num{}
		}
		if i == 0 || Compare(m, x) <= 0 {
			m = x
		}
	}
	return m
}

// Min is min([xs...]) of an array: undefined when any element is, else the
// last of the smallest.
func Min(xs ...Num) Num {
	var m Num
	for i, x := range xs {
		if !x.Defined() {
			return Num{}
		}
		if i == 0 || Compare(m, x) >= 0 {
			m = x
		}
	}
	return m
}

// Less, Greater, ... compare defined numbers; false when either is undefined.
func Less(x, y Num) bool      { return x.Defined() && y.Defined() && Compare(x, y) < 0 }
func LessEq(x, y Num) bool    { return x.Defined() && y.Defined() && Compare(x, y) <= 0 }
func Greater(x, y Num) bool   { return x.Defined() && y.Defined() && Compare(x, y) > 0 }
func GreaterEq(x, y Num) bool { return x.Defined() && y.Defined() && Compare(x, y) >= 0 }
func Equal(x, y Num) bool     { return x.Defined() && y.Defined() && Compare(x, y) == 0 }

// GoString helps test failures.
func (n Num) GoString() string { return fmt.Sprintf("regonum.Text(%q)", n.String()) }
