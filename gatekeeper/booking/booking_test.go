package booking_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/booking"
)

func TestMicroUSD(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"0.0", 0},
		{"0.000000", 0},
		{"0.000001", 1},
		{"0.05", 50_000}, // a leading zero in the fraction is kept
		{"2.5", 2_500_000},
		{"2.49", 2_490_000},
		{"2.490000", 2_490_000},
		{"1000", 1_000_000_000},
		{"123456789012", 123_456_789_012_000_000},        // 12 integer digits, the most
		{"999999999999.999999", 999_999_999_999_999_999}, // the largest amount: fits int64
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := booking.MicroUSD(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("MicroUSD(%q) = %d, %v; want %d, nil", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestMicroUSDRefuses(t *testing.T) {
	for _, in := range []string{
		"", " 1", "1 ", "1\n", "\t1",
		"+1", "-1", "-0", "-0.01", // no sign, not even on zero
		"01", "00", "00.5", "010.00", // no leading zeros
		"1.", ".5", "1..2", "1.2.3",
		"1e3", "1E3", "1e-3", "0x10", "1_000", "1,000", "2,49", "$1", "1 USD",
		"2.4900001", "0.0000001", // 7 decimals
		"1000000000000",        // 13 integer digits
		"99999999999999999999", // beyond int64
		"NaN", "Inf", "infinity",
		"١", "１", "½", // digits outside ASCII
		"1\x00", "\xff",
	} {
		t.Run(in, func(t *testing.T) {
			got, err := booking.MicroUSD(in)
			if !errors.Is(err, booking.ErrFacts) || got != 0 {
				t.Fatalf("MicroUSD(%q) = %d, %v; want 0, ErrFacts", in, got, err)
			}
		})
	}
	// the message quotes the input, escaped, so a log line stays one line
	if _, err := booking.MicroUSD("1\n"); err.Error() != `booking: "1\n" is not a plain decimal USD amount: booking facts invalid` {
		t.Fatalf("message %q", err)
	}
}

var now = time.Unix(1_750_000_000, 0).UTC()

// facts is a valid manifest and entitlement (2×8 GPUs for 12.25 h at
// $2.49 per GPU-hour on a 4×8 booking); each case edits a fresh copy.
func facts() (manifest, entitlement map[string]any) {
	manifest = map[string]any{
		"hardware": map[string]any{"nodes": json.Number("2"), "gpus_per_node": json.Number("8")},
		"budget":   map[string]any{"max_wall_clock_hours": json.Number("12.25")},
	}
	entitlement = map[string]any{
		"gpu":                    map[string]any{"nodes": int64(4), "gpus_per_node": int64(8)},
		"term":                   map[string]any{"end": now.Unix() + 30*86400},
		"price_per_gpu_hour_usd": "2.49",
	}
	return manifest, entitlement
}

func set(doc map[string]any, obj, key string, v any) {
	if obj == "" {
		doc[key] = v
		return
	}
	doc[obj].(map[string]any)[key] = v
}

func del(doc map[string]any, obj, key string) {
	if obj == "" {
		delete(doc, key)
		return
	}
	delete(doc[obj].(map[string]any), key)
}

func TestForCreate(t *testing.T) {
	termEnd := time.Unix(now.Unix()+30*86400, 0).UTC()
	hours := func(c int64) time.Time { return now.Add(time.Duration(c) * 36 * time.Second) } // c centi-hours
	for _, tc := range []struct {
		name string
		edit func(m, e map[string]any)
		want booking.Run
	}{
		{
			// 16 × 12.25 h × $2.49 = $488.04 exactly
			"base", func(m, e map[string]any) {},
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(1225), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 488_040_000},
		},
		{
			// 3 × 16 h × $2.49 = $119.52 (lib_test.rego's test_money_is_exact)
			"three GPUs sixteen hours", func(m, e map[string]any) {
				set(m, "hardware", "nodes", json.Number("3"))
				set(m, "hardware", "gpus_per_node", json.Number("1"))
				set(m, "budget", "max_wall_clock_hours", json.Number("16"))
			},
			booking.Run{GPUs: 3, BookedGPUs: 32, End: hours(1600), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 119_520_000},
		},
		{
			// 1 GPU × 0.01 h × $0.000001 = 0.01 µUSD: up to 1 µUSD, then to the cent
			"rounds up to the cent", func(m, e map[string]any) {
				set(m, "hardware", "nodes", json.Number("1"))
				set(m, "hardware", "gpus_per_node", json.Number("1"))
				set(m, "budget", "max_wall_clock_hours", json.Number("0.01"))
				e["price_per_gpu_hour_usd"] = "0.000001"
			},
			booking.Run{GPUs: 1, BookedGPUs: 32, End: hours(1), TermEnd: termEnd, PriceMicroUSD: 1, ComputeMicroUSD: 10_000},
		},
		{
			"a whole cent stays", func(m, e map[string]any) {
				set(m, "hardware", "nodes", json.Number("1"))
				set(m, "hardware", "gpus_per_node", json.Number("1"))
				set(m, "budget", "max_wall_clock_hours", json.Number("1"))
				e["price_per_gpu_hour_usd"] = "0.01"
			},
			booking.Run{GPUs: 1, BookedGPUs: 32, End: hours(100), TermEnd: termEnd, PriceMicroUSD: 10_000, ComputeMicroUSD: 10_000},
		},
		{
			"one micro-USD over a cent", func(m, e map[string]any) {
				set(m, "hardware", "nodes", json.Number("1"))
				set(m, "hardware", "gpus_per_node", json.Number("1"))
				set(m, "budget", "max_wall_clock_hours", json.Number("1"))
				e["price_per_gpu_hour_usd"] = "0.010001"
			},
			booking.Run{GPUs: 1, BookedGPUs: 32, End: hours(100), TermEnd: termEnd, PriceMicroUSD: 10_001, ComputeMicroUSD: 20_000},
		},
		{
			"free", func(m, e map[string]any) { e["price_per_gpu_hour_usd"] = "0" },
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(1225), TermEnd: termEnd, PriceMicroUSD: 0, ComputeMicroUSD: 0},
		},
		{
			// 9 × 1 h × $999,999,999,999.999999 rounds up to 9×10^18, below 2^63
			"largest cost", func(m, e map[string]any) {
				set(m, "hardware", "nodes", json.Number("9"))
				set(m, "hardware", "gpus_per_node", json.Number("1"))
				set(m, "budget", "max_wall_clock_hours", json.Number("1"))
				e["price_per_gpu_hour_usd"] = "999999999999.999999"
			},
			booking.Run{GPUs: 9, BookedGPUs: 32, End: hours(100), TermEnd: termEnd, PriceMicroUSD: 999_999_999_999_999_999, ComputeMicroUSD: 9_000_000_000_000_000_000},
		},
		{
			"one decimal of hours", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("6.5")) },
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(650), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 258_960_000},
		},
		{
			"two decimals of hours with a trailing zero", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("6.50")) },
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(650), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 258_960_000},
		},
		{
			"hours as int64", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", int64(6)) },
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(600), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 239_040_000},
		},
		{
			// the longest run whose end fits a time.Duration
			"longest run", func(m, e map[string]any) {
				set(m, "budget", "max_wall_clock_hours", json.Number("2562047.78"))
				e["price_per_gpu_hour_usd"] = "0"
			},
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(256_204_778), TermEnd: termEnd, PriceMicroUSD: 0, ComputeMicroUSD: 0},
		},
		{
			"counts as int, int64 and integral float64", func(m, e map[string]any) {
				set(m, "hardware", "nodes", 2)
				set(m, "hardware", "gpus_per_node", int64(8))
				set(e, "gpu", "nodes", float64(4))
				set(e, "gpu", "gpus_per_node", json.Number("8"))
			},
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(1225), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 488_040_000},
		},
		{
			"largest counts", func(m, e map[string]any) {
				set(m, "hardware", "nodes", json.Number("1048576"))
				set(m, "hardware", "gpus_per_node", json.Number("1048576"))
				set(e, "gpu", "nodes", int64(1<<20))
				set(e, "gpu", "gpus_per_node", int64(1<<20))
				set(m, "budget", "max_wall_clock_hours", json.Number("0.01"))
				e["price_per_gpu_hour_usd"] = "0.000001"
			},
			// 2^40 GPUs × 0.01 µUSD = 10,995,116,277.76 µUSD, up to the cent
			booking.Run{GPUs: 1 << 40, BookedGPUs: 1 << 40, End: hours(1), TermEnd: termEnd, PriceMicroUSD: 1, ComputeMicroUSD: 10_995_120_000},
		},
		{
			// the admission decides CodeRunPastTerm from End and TermEnd; ForCreate only reports them
			"term ended before now", func(m, e map[string]any) { set(e, "term", "end", now.Unix()-1) },
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(1225), TermEnd: now.Add(-time.Second), PriceMicroUSD: 2_490_000, ComputeMicroUSD: 488_040_000},
		},
		{
			"term end as float64", func(m, e map[string]any) { set(e, "term", "end", float64(2e9)) },
			booking.Run{GPUs: 16, BookedGPUs: 32, End: hours(1225), TermEnd: time.Unix(2e9, 0).UTC(), PriceMicroUSD: 2_490_000, ComputeMicroUSD: 488_040_000},
		},
		{
			"booking smaller than the run", func(m, e map[string]any) { set(e, "gpu", "nodes", int64(1)) },
			booking.Run{GPUs: 16, BookedGPUs: 8, End: hours(1225), TermEnd: termEnd, PriceMicroUSD: 2_490_000, ComputeMicroUSD: 488_040_000},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, e := facts()
			tc.edit(m, e)
			got, err := booking.ForCreate(m, e, now)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("ForCreate\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestForCreateRefuses(t *testing.T) {
	const (
		hw     = "manifest hardware.nodes and hardware.gpus_per_node must be positive integers"
		gpu    = "entitlement gpu.nodes and gpu.gpus_per_node must be positive integers"
		hrs    = "manifest budget.max_wall_clock_hours must be a positive number with at most 2 decimals"
		hrsMax = "manifest budget.max_wall_clock_hours out of range"
		term   = "entitlement term.end must be unix seconds"
		price  = "entitlement price_per_gpu_hour_usd must be a decimal USD string"
		counts = "GPU counts out of range"
		cost   = "compute cost out of range"
	)
	for _, tc := range []struct {
		name string
		edit func(m, e map[string]any)
		want string
	}{
		{"no hardware", func(m, e map[string]any) { del(m, "", "hardware") }, hw},
		{"hardware not an object", func(m, e map[string]any) { m["hardware"] = []any{} }, hw},
		{"no nodes", func(m, e map[string]any) { del(m, "hardware", "nodes") }, hw},
		{"zero nodes", func(m, e map[string]any) { set(m, "hardware", "nodes", json.Number("0")) }, hw},
		{"negative nodes", func(m, e map[string]any) { set(m, "hardware", "nodes", json.Number("-2")) }, hw},
		// the schema's "integer" lets 2.0 and 2e0 through; Go reads only integer text
		{"nodes 2.0", func(m, e map[string]any) { set(m, "hardware", "nodes", json.Number("2.0")) }, hw},
		{"nodes 2e0", func(m, e map[string]any) { set(m, "hardware", "nodes", json.Number("2e0")) }, hw},
		{"nodes beyond int64", func(m, e map[string]any) { set(m, "hardware", "nodes", json.Number("9223372036854775808")) }, hw},
		{"nodes as a string", func(m, e map[string]any) { set(m, "hardware", "nodes", "2") }, hw},
		{"nodes fractional float64", func(m, e map[string]any) { set(m, "hardware", "nodes", 2.5) }, hw},
		{"nodes float64 2^53", func(m, e map[string]any) { set(m, "hardware", "nodes", float64(1<<53)) }, hw},
		{"nodes NaN", func(m, e map[string]any) { set(m, "hardware", "nodes", math.NaN()) }, hw},
		{"zero gpus per node as int", func(m, e map[string]any) { set(m, "hardware", "gpus_per_node", 0) }, hw},
		{"negative gpus per node as int64", func(m, e map[string]any) { set(m, "hardware", "gpus_per_node", int64(-8)) }, hw},
		{"gpus per node as int32", func(m, e map[string]any) { set(m, "hardware", "gpus_per_node", int32(8)) }, hw},

		{"no entitlement gpu", func(m, e map[string]any) { del(e, "", "gpu") }, gpu},
		{"zero booked nodes", func(m, e map[string]any) { set(e, "gpu", "nodes", int64(0)) }, gpu},
		{"booked gpus per node fractional", func(m, e map[string]any) { set(e, "gpu", "gpus_per_node", 7.5) }, gpu},
		{"booked gpus per node negative float64", func(m, e map[string]any) { set(e, "gpu", "gpus_per_node", -8.0) }, gpu},

		{"no budget", func(m, e map[string]any) { del(m, "", "budget") }, hrs},
		{"no hours", func(m, e map[string]any) { del(m, "budget", "max_wall_clock_hours") }, hrs},
		{"zero hours", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("0")) }, hrs},
		{"zero hours with decimals", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("0.00")) }, hrs},
		{"zero hours as int64", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", int64(0)) }, hrs},
		{"negative hours", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("-1")) }, hrs},
		{"negative zero hours", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("-0")) }, hrs},
		{"three decimals", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("6.125")) }, hrs},
		// Go reads the decimal text: a trailing zero past 2 decimals or an exponent is refused (Rego's lib.centi reads them)
		{"three decimals, trailing zero", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("6.500")) }, hrs},
		{"exponent", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("1e2")) }, hrs},
		{"leading zero", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("06")) }, hrs},
		{"ten integer digits", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("1000000000")) }, hrs},
		{"hours as float64", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", 6.0) }, hrs},
		{"hours as int", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", 6) }, hrs},
		{"hours as a string", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", "6") }, hrs},
		{"negative hours as int64", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", int64(-6)) }, hrs},
		// past 2,562,047.78 h now + hours would wrap a time.Duration into the past
		{"end beyond a Duration", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("2562047.79")) }, hrsMax},
		{"nine integer digits", func(m, e map[string]any) { set(m, "budget", "max_wall_clock_hours", json.Number("999999999.99")) }, hrsMax},

		{"no term", func(m, e map[string]any) { del(e, "", "term") }, term},
		{"no term end", func(m, e map[string]any) { del(e, "term", "end") }, term},
		{"term end zero", func(m, e map[string]any) { set(e, "term", "end", int64(0)) }, term},
		{"term end negative", func(m, e map[string]any) { set(e, "term", "end", int64(-1)) }, term},
		{"term end fractional", func(m, e map[string]any) { set(e, "term", "end", 1.9e9+0.5) }, term},
		{"term end RFC 3339", func(m, e map[string]any) { set(e, "term", "end", "2030-01-01T00:00:00Z") }, term},

		{"no price", func(m, e map[string]any) { del(e, "", "price_per_gpu_hour_usd") }, price},
		{"price as a number", func(m, e map[string]any) { e["price_per_gpu_hour_usd"] = 2.49 }, price},
		{"price seven decimals", func(m, e map[string]any) { e["price_per_gpu_hour_usd"] = "2.4900001" }, price},
		{"price negative", func(m, e map[string]any) { e["price_per_gpu_hour_usd"] = "-2.49" }, price},
		{"price empty", func(m, e map[string]any) { e["price_per_gpu_hour_usd"] = "" }, price},

		{"nodes over 2^20", func(m, e map[string]any) { set(m, "hardware", "nodes", json.Number("1048577")) }, counts},
		{"gpus per node over 2^20", func(m, e map[string]any) { set(m, "hardware", "gpus_per_node", int64(1<<20+1)) }, counts},
		{"booked nodes over 2^20", func(m, e map[string]any) { set(e, "gpu", "nodes", float64(1<<20+1)) }, counts},
		{"booked gpus per node over 2^20", func(m, e map[string]any) { set(e, "gpu", "gpus_per_node", int64(math.MaxInt64)) }, counts},

		// 10 × 1 h × $999,999,999,999.999999 rounds up to 10^19, past 2^63
		{"cost past int64", func(m, e map[string]any) {
			set(m, "hardware", "nodes", json.Number("10"))
			set(m, "hardware", "gpus_per_node", json.Number("1"))
			set(m, "budget", "max_wall_clock_hours", json.Number("1"))
			e["price_per_gpu_hour_usd"] = "999999999999.999999"
		}, cost},
		{"cost far past int64", func(m, e map[string]any) {
			set(m, "hardware", "nodes", json.Number("1048576"))
			set(m, "hardware", "gpus_per_node", json.Number("1048576"))
			set(m, "budget", "max_wall_clock_hours", json.Number("2562047.78"))
			e["price_per_gpu_hour_usd"] = "999999999999.999999"
		}, cost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, e := facts()
			tc.edit(m, e)
			got, err := booking.ForCreate(m, e, now)
			if !errors.Is(err, booking.ErrFacts) || got != (booking.Run{}) {
				t.Fatalf("ForCreate = %+v, %v; want the zero Run and ErrFacts", got, err)
			}
			if want := "booking: " + tc.want + ": booking facts invalid"; err.Error() != want {
				t.Fatalf("error %q\n want %q", err, want)
			}
		})
	}
}

// ForCreate checks the fields in a fixed order and names the first bad one.
func TestForCreateNilFacts(t *testing.T) {
	_, err := booking.ForCreate(nil, nil, now)
	if !errors.Is(err, booking.ErrFacts) ||
		err.Error() != "booking: manifest hardware.nodes and hardware.gpus_per_node must be positive integers: booking facts invalid" {
		t.Fatalf("ForCreate(nil, nil) error %v", err)
	}
}

func TestGrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any // estimates["run_grace_seconds"]; absent when nil
		want time.Duration
	}{
		{"absent", nil, booking.DefaultGrace},
		{"zero", json.Number("0"), 0},
		{"an hour", json.Number("3600"), time.Hour},
		{"a second", json.Number("1"), time.Second},
		{"MaxGrace", json.Number("604800"), booking.MaxGrace},
		{"past MaxGrace", json.Number("604801"), booking.DefaultGrace},
		{"negative", json.Number("-1"), booking.DefaultGrace},
		{"fractional", json.Number("1.5"), booking.DefaultGrace},
		{"integral with a decimal point", json.Number("3600.0"), booking.DefaultGrace}, // json.Number read as integer text only
		{"exponent", json.Number("1e3"), booking.DefaultGrace},
		{"beyond int64", json.Number("9223372036854775808"), booking.DefaultGrace},
		// secs × time.Second past 2^63 ns used to wrap to a negative grace and
		// put the run's end before its start (a faulty bundle freeing GPUs)
		{"past a Duration in seconds", json.Number("9223372037"), booking.DefaultGrace},
		{"int64 max", int64(math.MaxInt64), booking.DefaultGrace},
		{"float64 past a Duration", float64(1e10), booking.DefaultGrace},
		{"int64", int64(7200), 2 * time.Hour},
		{"int64 MaxGrace", int64(604800), booking.MaxGrace},
		{"int64 past MaxGrace", int64(604801), booking.DefaultGrace},
		{"int64 negative", int64(-3600), booking.DefaultGrace},
		{"float64", float64(7200), 2 * time.Hour},
		{"float64 negative zero", math.Copysign(0, -1), 0},
		{"float64 fractional", 7200.5, booking.DefaultGrace},
		{"float64 negative", float64(-3600), booking.DefaultGrace},
		{"float64 NaN", math.NaN(), booking.DefaultGrace},
		{"float64 infinity", math.Inf(1), booking.DefaultGrace},
		{"int is not a decoded shape", 7200, booking.DefaultGrace},
		{"string", "7200", booking.DefaultGrace},
		{"bool", true, booking.DefaultGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est := map[string]any{"total_cost_micro_usd": json.Number("1")}
			if tc.v != nil {
				est["run_grace_seconds"] = tc.v
			}
			if got := booking.Grace(est); got != tc.want {
				t.Fatalf("Grace(%#v) = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
	if got := booking.Grace(nil); got != booking.DefaultGrace {
		t.Fatalf("Grace(nil) = %v", got)
	}
}

// The bounds are part of the ledger's contract: a run holds its GPUs for an
// hour past its end unless the bundle says otherwise, a week at most.
func TestGraceBounds(t *testing.T) {
	if booking.DefaultGrace != time.Hour || booking.MaxGrace != 7*24*time.Hour {
		t.Fatalf("DefaultGrace %v, MaxGrace %v", booking.DefaultGrace, booking.MaxGrace)
	}
}

func TestEstimateMicroUSD(t *testing.T) {
	for _, tc := range []struct {
		name    string
		compute int64
		v       any // estimates["total_cost_micro_usd"]; absent when nil
		want    int64
	}{
		{"absent", 100, nil, 100},
		{"absent, zero compute", 0, nil, 0},
		{"bundle higher", 100, json.Number("250"), 250},
		{"bundle lower", 100, json.Number("50"), 100},
		{"bundle equal", 100, json.Number("100"), 100},
		{"bundle negative", 100, json.Number("-500"), 100},
		{"bundle int64 max", 100, json.Number("9223372036854775807"), math.MaxInt64},
		{"bundle beyond int64", 100, json.Number("9223372036854775808"), 100},
		{"bundle fractional", 100, json.Number("250.5"), 100},
		{"bundle integral with a decimal point", 100, json.Number("250.0"), 100},
		{"bundle exponent", 100, json.Number("2.5e2"), 100},
		{"int64", 100, int64(300), 300},
		{"int64 lower", 100, int64(30), 100},
		{"float64", 100, float64(300), 300},
		{"float64 fractional", 100, 300.5, 100},
		{"float64 NaN", 100, math.NaN(), 100},
		{"float64 past int64", 100, 9.3e18, 100},
		{"int is not a decoded shape", 100, 300, 100},
		{"string", 100, "300", 100},
		// a negative compute (never produced by ForCreate) is floored at 0 by the absent bundle total
		{"negative compute", -5, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est := map[string]any{"run_grace_seconds": json.Number("3600")}
			if tc.v != nil {
				est["total_cost_micro_usd"] = tc.v
			}
			if got := booking.EstimateMicroUSD(tc.compute, est); got != tc.want {
				t.Fatalf("EstimateMicroUSD(%d, %#v) = %d, want %d", tc.compute, tc.v, got, tc.want)
			}
		})
	}
	if got := booking.EstimateMicroUSD(7, nil); got != 7 {
		t.Fatalf("EstimateMicroUSD(7, nil) = %d", got)
	}
}

// TestWithLostWork: the GPU-hours the checkpoint model expects a run to
// lose to failures are priced like the booked ones, exactly (the budget
// gate's lost_work_micro_usd): hundredths of a GPU-hour × µUSD / 100, up to
// the µUSD, then up to the cent, added to the compute cost.
func TestWithLostWork(t *testing.T) {
	m, e := facts()
	run, err := booking.ForCreate(m, e, now) // 16 × 12.25 h × $2.49 = $488.04
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		price       int64 // µUSD per GPU-hour; the base's 2.49 USD when 0
		lost        int64 // hundredths of a GPU-hour
		lostMicro   int64
		computeFrom int64 // the compute before the lost work
	}{
		// 0.85 GPU-hours × $2.49 = $2.1165 → $2.12
		{"rounded up to the cent", 0, 85, 2_120_000, 488_040_000},
		{"nothing lost", 0, 0, 0, 488_040_000},
		// 0.01 GPU-hours × $0.000001 = 0.01 µUSD → 1 µUSD → one cent
		{"a sliver is a cent", 1, 1, 10_000, 10_000},
		// 43.06 GPU-hours × $2.49 = $107.2194 → $107.22 (a measured failure rate)
		{"telemetry's lost work", 0, 4306, 107_220_000, 488_040_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run
			if tc.price != 0 {
				r.PriceMicroUSD, r.ComputeMicroUSD = tc.price, tc.computeFrom
			}
			got, err := r.WithLostWork(tc.lost)
			if err != nil {
				t.Fatal(err)
			}
			if got.LostWorkMicroUSD != tc.lostMicro || got.ComputeMicroUSD != tc.computeFrom+tc.lostMicro {
				t.Fatalf("WithLostWork(%d) = lost %d, compute %d µUSD; want %d, %d",
					tc.lost, got.LostWorkMicroUSD, got.ComputeMicroUSD, tc.lostMicro, tc.computeFrom+tc.lostMicro)
			}
		})
	}
	for name, lost := range map[string]int64{"negative": -1, "past int64": math.MaxInt64} {
		if got, err := run.WithLostWork(lost); !errors.Is(err, booking.ErrFacts) || got != (booking.Run{}) {
			t.Errorf("%s: WithLostWork(%d) = %+v, %v; want the zero Run and ErrFacts", name, lost, got, err)
		}
	}
}
