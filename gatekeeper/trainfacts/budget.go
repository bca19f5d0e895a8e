package trainfacts

import (
	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/internal/regonum"
	"github.com/open-policy-agent/opa/v1/ast"
)

// The money: policies/ito/budget/budget.rego (its package METADATA has
// the formulas), with gatekeeper/booking's policy money (lib.micro_usd,
// lib.centi, lib.ceil_div, lib.ceil_cent, lib.usd, lib.centi_string).

type budgetConfig struct {
	storagePrice, egressPrice, hoursPerMonth, bytesPerToken regonum.Num
}

func (m *Model) readBudget(r *reader, cfg map[string]any) {
	if r.err != nil {
		return
	}
	// lib.micro_usd: undefined (not an error) for anything but a plain decimal string
	m.budget = budgetConfig{
		storagePrice:  booking.PolicyMicroUSD(cfg["storage_price_per_gib_month_usd"]),
		egressPrice:   booking.PolicyMicroUSD(cfg["egress_price_per_gib_usd"]),
		hoursPerMonth: r.num(cfg, "hours_per_month"),
		bytesPerToken: r.num(cfg, "bytes_per_token"),
	}
}

func ceilDiv(c *regonum.Calc, a, b regonum.Num) regonum.Num { return booking.CeilDiv(c, a, b) }

// equalValues is Rego's == on two values of the input.
func equalValues(a, b any) bool {
	x, err1 := ast.InterfaceToValue(a)
	y, err2 := ast.InterfaceToValue(b)
	return err1 == nil && err2 == nil && x.Compare(y) == 0
}

// budgetFacts are input.facts.budget.
type budgetFacts struct {
	worldSize, centiHours, price, ceiling, maxIncremental, booked, lostCentiGPUHours, lostWork, compute,
	storage, egressGiB, egress, total, pastTerm, incremental regonum.Num
	strs map[string]string
}

func (m *Model) budgetFacts(c *regonum.Calc, in input, ckpt checkpointFacts) budgetFacts {
	f := budgetFacts{strs: map[string]string{}}
	mf := in.manifest
	nodes, gpn := count(at(mf, "hardware", "nodes")), count(at(mf, "hardware", "gpus_per_node"))
	if nodes.Defined() && gpn.Defined() {
		f.worldSize = c.Mul(nodes, gpn)
	}
	f.centiHours = policyCenti(at(mf, "budget", "max_wall_clock_hours"))
	f.price = policyMicroUSD(at(in.doc, "entitlement", "price_per_gpu_hour_usd"))
	f.ceiling = policyMicroUSD(at(mf, "budget", "ceiling_usd"))
	f.maxIncremental = policyMicroUSD(at(mf, "budget", "max_incremental_usd"))
	f.booked = booking.CeilCent(c, ceilDiv(c, c.Mul(c.Mul(f.worldSize, f.centiHours), f.price), regonum.Int(100)))
	// the GPU-hours expected lost to failures are paid for (budget._lost_centi_gpu_hours)
	f.lostCentiGPUHours = regonum.Ceil(c.Mul(c.Mul(f.worldSize, f.centiHours), ckpt.lostFraction))
	f.lostWork = booking.CeilCent(c, ceilDiv(c, c.Mul(f.lostCentiGPUHours, f.price), regonum.Int(100)))
	f.compute = c.Add(f.booked, f.lostWork)
	months := regonum.Max(one, ceilDiv(c, f.centiHours, c.Mul(m.budget.hoursPerMonth, regonum.Int(100))))

	ckptV, hasCkpt := at(mf, "checkpoint")
	size := num(at(ckptV, "size_estimate_gib"))
	retention := count(at(ckptV, "retention"))
	if regonum.GreaterEq(size, zero) && retention.Defined() {
		gibMonths := c.Mul(regonum.Ceil(size), months)
		remote := c.Mul(ckpt.remoteWriteGiB, m.budget.egressPrice)
		if gibMonths.Defined() && remote.Defined() {
			f.storage = booking.CeilCent(c, c.Add(c.Mul(c.Mul(gibMonths, retention), m.budget.storagePrice), remote))
		}
	}
	if !truthy(ckptV, hasCkpt) {
		f.storage = zero
	}

	f.egressGiB = ceilDiv(c, c.Mul(m.egressTokens(c, in), m.budget.bytesPerToken), gib)
	f.egress = booking.CeilCent(c, c.Mul(f.egressGiB, m.budget.egressPrice))
	f.total = c.Add(c.Add(f.compute, f.storage), f.egress)

	now, end := num(at(in.doc, "now")), num(at(in.doc, "entitlement", "term", "end"))
	if now.Defined() && end.Defined() {
		f.pastTerm = regonum.Max(zero, c.Sub(c.Add(now, c.Mul(f.centiHours, regonum.Int(36))), end))
	}
	pastTermMicro := booking.CeilCent(c, ceilDiv(c, c.Mul(c.Mul(f.worldSize, f.pastTerm), f.price), regonum.Int(3600)))
	f.incremental = c.Add(c.Add(pastTermMicro, f.storage), f.egress)

	usd := func(key string, micro regonum.Num) {
		if micro.Defined() {
			if s, ok := booking.USD(c, micro); ok {
				f.strs[key] = s
			}
		}
	}
	if wc := c.Mul(f.worldSize, f.centiHours); wc.Defined() {
		if s, ok := booking.CentiString(c, wc); ok {
			f.strs["gpu_hours"] = s
		}
	}
	if f.lostCentiGPUHours.Defined() {
		if s, ok := booking.CentiString(c, f.lostCentiGPUHours); ok {
			f.strs["lost_gpu_hours"] = s
		}
	}
	usd("compute_usd", f.compute)
	usd("lost_work_usd", f.lostWork)
	usd("storage_usd", f.storage)
	usd("egress_usd", f.egress)
	usd("total_usd", f.total)
	usd("incremental_usd", f.incremental)
	return f
}

func policyCenti(v any, ok bool) regonum.Num {
	if !ok {
		return regonum.Num{}
	}
	return booking.PolicyCenti(v)
}

func policyMicroUSD(v any, ok bool) regonum.Num {
	if !ok {
		return regonum.Num{}
	}
	return booking.PolicyMicroUSD(v)
}

// egressTokens is budget._egress_tokens: the run's tokens read from
// datasets outside the booking's region, bounded by the run's tokens.
func (m *Model) egressTokens(c *regonum.Calc, in input) regonum.Num {
	region, ok := str(at(in.doc, "entitlement", "region"))
	if !ok {
		return regonum.Num{}
	}
	datasets, isArr := at(in.manifest, "data")
	arr, isArr2 := datasets.([]any)
	if !isArr || !isArr2 {
		return regonum.Num{}
	}
	remoteTokens := zero
	remote, priceable := 0, true
	for _, d := range arr {
		var r any
		if o, isObj := d.(map[string]any); isObj {
			if v, has := o["region"]; has {
				r = v
			}
		}
		if equalValues(r, region) {
			continue
		}
		remote++
		if t := count(at(d, "tokens")); t.Defined() {
			remoteTokens = c.Add(remoteTokens, t)
		} else {
			priceable = false
		}
	}
	if remote == 0 {
		return zero
	}
	obj, _ := objAt(in.manifest, "objective")
	var limits []regonum.Num
	if t := count(at(obj, "max_tokens")); t.Defined() {
		limits = append(limits, t)
	}
	steps, gbs, seq := count(at(obj, "max_steps")), count(at(obj, "global_batch_size")), count(at(obj, "sequence_length"))
	if steps.Defined() && gbs.Defined() && seq.Defined() {
		if n := c.Mul(c.Mul(steps, gbs), seq); len(limits) == 0 || !regonum.Equal(limits[0], n) {
			limits = append(limits, n)
		}
	}
	if !priceable || len(limits) == 0 {
		return regonum.Num{}
	}
	least := limits[0]
	if len(limits) == 2 && regonum.Less(limits[1], least) {
		least = limits[1]
	}
	return regonum.Min(least, remoteTokens)
}

func (f budgetFacts) facts() map[string]any {
	out := map[string]any{}
	put(out, "world_size", f.worldSize)
	put(out, "centi_hours", f.centiHours)
	put(out, "price_micro_usd", f.price)
	put(out, "ceiling_micro_usd", f.ceiling)
	put(out, "max_incremental_micro_usd", f.maxIncremental)
	put(out, "compute_micro_usd", f.compute)
	put(out, "booked_compute_micro_usd", f.booked)
	put(out, "lost_centi_gpu_hours", f.lostCentiGPUHours)
	put(out, "lost_work_micro_usd", f.lostWork)
	put(out, "storage_micro_usd", f.storage)
	put(out, "egress_gib", f.egressGiB)
	put(out, "egress_micro_usd", f.egress)
	put(out, "total_micro_usd", f.total)
	put(out, "past_term_seconds", f.pastTerm)
	put(out, "incremental_micro_usd", f.incremental)
	for k, s := range f.strs {
		out[k] = s
	}
	return out
}

// LostCentiGPUHours reads input.facts.budget.lost_centi_gpu_hours of a
// policy input document: hundredths of the GPU-hours the facts model
// expects the run to lose to failures (ceil(W × centi-hours ×
// lost_fraction)), which its compute cost pays for. ok is false when the
// document holds no facts, or no whole number there (a run whose lost work
// is unknown).
func LostCentiGPUHours(doc map[string]any) (int64, bool) {
	budget, _ := objAt(doc, "facts", "budget")
	n, ok := regonum.Of(budget["lost_centi_gpu_hours"])
	if !ok {
		return 0, false
	}
	return n.Int64()
}
