package trainfacts

import (
	"errors"
	"strings"

	"github.com/itocompute/itogate/internal/regonum"
)

// The checkpoint model: policies/ito/checkpoint/checkpoint.rego (its
// package METADATA has the formulas).

type checkpointConfig struct {
	bytesPerParam, detectionDefault, restartOverhead, gpuHoursBetweenFailures regonum.Num
	defaultTiers                                                              map[string]any
	telemetry                                                                 telemetryConfig
}

// telemetryConfig is data.ito.config.checkpoint.telemetry: the bounds of the
// entitlement's telemetry claim.
type telemetryConfig struct {
	maxAge, minWindow, rateMin, rateMax, writeMin, writeMax regonum.Num
}

type storageRow struct {
	write, read, aggregate, quota regonum.Num
}

func (m *Model) readCheckpoint(r *reader, cfg, storage map[string]any) {
	if r.err != nil {
		return
	}
	var c regonum.Calc
	m.ckpt = checkpointConfig{
		bytesPerParam:           c.Add(r.num(cfg, "model_bytes_per_param"), r.num(cfg, "optimizer_bytes_per_param")),
		detectionDefault:        r.num(cfg, "failure_detection_seconds_default"),
		restartOverhead:         r.num(cfg, "restart_overhead_seconds"),
		gpuHoursBetweenFailures: r.num(cfg, "gpu_hours_between_failures"),
		defaultTiers:            r.obj(cfg, "default_storage_tiers"),
	}
	tel := r.obj(cfg, "telemetry")
	rate, write := r.obj(tel, "interruptions_per_gpu_hour"), r.obj(tel, "write_gbytes_per_s_per_node")
	m.ckpt.telemetry = telemetryConfig{
		maxAge: r.num(tel, "max_age_seconds"), minWindow: r.num(tel, "min_window_seconds"),
		rateMin: r.num(rate, "min"), rateMax: r.num(rate, "max"),
		writeMin: r.num(write, "min"), writeMax: r.num(write, "max"),
	}
	for scheme, t := range m.ckpt.defaultTiers {
		if _, ok := t.(string); !ok {
			r.fail("config.checkpoint.default_storage_tiers[%s] is not a string", scheme)
		}
	}
	m.storage = readRows(r, "storage", storage, func(row map[string]any) storageRow {
		return storageRow{
			write:     r.num(row, "write_gbytes_per_s_per_node"),
			read:      r.num(row, "read_gbytes_per_s_per_node"),
			aggregate: r.num(row, "aggregate_gbytes_per_s"),
			quota:     r.num(row, "quota_gib"),
		}
	})
	m.tiers = sortedKeys(m.storage)
}

// checkpointFacts are input.facts.checkpoint.
type checkpointFacts struct {
	computedGiB, declaredGiB, sizeGiB, sizeGB, writeSeconds, resumeSeconds, detectionSeconds,
	steps, stepSeconds, intervalSeconds, stallSeconds, lostSeconds, worldSize, lostFraction,
	goodput, gpuHoursBetweenFailures, remoteWriteGiB, quotaGiB, neededGiB regonum.Num
	telemetry                               string // "" when undefined
	failureRateSource, writeBandwidthSource string
	tierName                                string
	hasTierName                             bool
	storageRegion                           any
	hasStorageRegion                        bool
	resumeByTier                            map[string]regonum.Num
}

var errObjectGet = errors.New("object.get: operand 1 must be object")

var gib = regonum.Int(1073741824)

func (m *Model) checkpoint(c *regonum.Calc, in input) checkpointFacts {
	var f checkpointFacts
	mf := in.manifest
	ckpt, hasCkpt := at(mf, "checkpoint")
	ckObj, hasPolicy := ckpt.(map[string]any)
	hasPolicy = hasPolicy && hasCkpt
	if !hasPolicy {
		ckObj = nil
	}
	if params := count(at(mf, "model", "parameters")); params.Defined() {
		f.computedGiB = c.Div(c.Mul(params, m.ckpt.bytesPerParam), gib)
	}
	if d := num(at(ckObj, "size_estimate_gib")); regonum.GreaterEq(d, zero) {
		f.declaredGiB = d
	}
	f.sizeGiB = regonum.Max(f.declaredGiB, f.computedGiB)
	f.sizeGB = c.Div(c.Mul(f.sizeGiB, gib), regonum.Int(1000000000))

	// _tier_name: the declared tier, else the scheme's default. Its second
	// definition calls object.get on the checkpoint, which is an error when
	// the checkpoint is not an object (the estimates always read the tier).
	if s, ok := str(at(ckObj, "storage_tier")); ok {
		f.tierName, f.hasTierName = s, true
	} else if hasCkpt && !hasPolicy {
		c.Err = errObjectGet
		return f
	} else if hasPolicy {
		if _, isStr := ckObj["storage_tier"].(string); !isStr {
			if scheme, ok := schemeOf(ckObj); ok {
				if t, ok := m.ckpt.defaultTiers[scheme]; ok {
					f.tierName, f.hasTierName = str(t, true)
				}
			}
		}
	}
	tier, hasTier := m.storage[f.tierName]
	hasTier = hasTier && f.hasTierName
	nodes := count(at(mf, "hardware", "nodes"))
	bandwidth := func(t storageRow, perNode regonum.Num) regonum.Num {
		return regonum.Min(c.Mul(nodes, perNode), t.aggregate)
	}
	tel := m.telemetry(c, in)
	f.telemetry = tel.status
	f.failureRateSource, f.gpuHoursBetweenFailures = "bundle", m.ckpt.gpuHoursBetweenFailures
	if tel.rate.Defined() {
		f.failureRateSource, f.gpuHoursBetweenFailures = "telemetry", c.Div(one, tel.rate)
	}
	writePerNode := tier.write
	f.writeBandwidthSource = "bundle"
	if w := tel.write(f.tierName, f.hasTierName); w.Defined() {
		f.writeBandwidthSource, writePerNode = "telemetry", w
	}
	// _restart_seconds: the declared restart_overhead_seconds, else (when
	// none is declared, or false) the bundle's
	var restart regonum.Num
	if v, ok := at(ckpt, "restart_overhead_seconds"); ok && count(v, true).Defined() {
		restart = count(v, true)
	} else if !truthy(v, ok) {
		restart = m.ckpt.restartOverhead
	}
	resume := func(t storageRow) regonum.Num {
		if !restart.Defined() {
			return regonum.Num{}
		}
		return c.Add(restart, c.Div(f.sizeGB, bandwidth(t, t.read)))
	}
	if hasTier {
		f.writeSeconds = c.Div(f.sizeGB, bandwidth(tier, writePerNode))
		f.resumeSeconds = resume(tier)
	}
	f.resumeByTier = map[string]regonum.Num{}
	for _, name := range m.tiers {
		if r := resume(m.storage[name]); r.Defined() {
			f.resumeByTier[name] = r
		}
	}

	if d := count(at(ckObj, "failure_detection_seconds")); d.Defined() {
		f.detectionSeconds = d
	} else if hasPolicy {
		if v, ok := ckObj["failure_detection_seconds"]; !ok || v == nil {
			f.detectionSeconds = m.ckpt.detectionDefault
		}
	}

	// steps: the smallest of max_steps and the steps max_tokens takes (a set:
	// a limit equal to one already in it is not added)
	obj, _ := objAt(mf, "objective")
	var limits []regonum.Num
	if s := count(at(obj, "max_steps")); s.Defined() {
		limits = append(limits, s)
	}
	if mt := count(at(obj, "max_tokens")); mt.Defined() {
		gbs, seq := count(at(obj, "global_batch_size")), count(at(obj, "sequence_length"))
		if gbs.Defined() && seq.Defined() {
			if n := ceilDiv(c, mt, c.Mul(gbs, seq)); n.Defined() && (len(limits) == 0 || !regonum.Equal(limits[0], n)) {
				limits = append(limits, n)
			}
		}
	}
	for i, s := range limits {
		if i == 0 || regonum.Less(s, f.steps) {
			f.steps = s
		}
	}
	if h := num(at(mf, "budget", "max_wall_clock_hours")); regonum.Greater(h, zero) {
		f.stepSeconds = c.Div(c.Mul(h, regonum.Int(3600)), f.steps)
	}
	interval := count(at(ckObj, "interval_steps"))
	if interval.Defined() {
		f.intervalSeconds = c.Mul(interval, f.stepSeconds)
	}
	if async, ok := at(ckObj, "async"); ok && async == true {
		f.stallSeconds = zero
	} else {
		f.stallSeconds = f.writeSeconds
	}
	f.lostSeconds = c.Add(c.Add(c.Div(f.intervalSeconds, two), f.detectionSeconds), f.resumeSeconds)
	if gpn := count(at(mf, "hardware", "gpus_per_node")); gpn.Defined() {
		f.worldSize = c.Mul(nodes, gpn)
	}
	f.lostFraction = c.Div(c.Div(c.Mul(f.worldSize, f.lostSeconds), regonum.Int(3600)), f.gpuHoursBetweenFailures)
	f.goodput = regonum.Max(zero, c.Sub(one, f.lostFraction))

	region, hasRegion := at(in.doc, "entitlement", "region")
	if s, ok := str(at(ckObj, "storage_region")); ok {
		f.storageRegion, f.hasStorageRegion = s, true
	} else if hasPolicy && hasRegion {
		f.storageRegion, f.hasStorageRegion = region, true
	}
	if f.hasStorageRegion && hasRegion {
		if equalValues(f.storageRegion, region) {
			f.remoteWriteGiB = zero
		} else if interval.Defined() {
			f.remoteWriteGiB = c.Mul(regonum.Floor(c.Div(f.steps, interval)), regonum.Ceil(f.sizeGiB))
		}
	}

	if q := num(at(in.doc, "entitlement", "storage_quota_gib")); q.Defined() {
		f.quotaGiB = q
	} else if hasTier {
		f.quotaGiB = tier.quota
	}
	if r := count(at(ckObj, "retention")); r.Defined() {
		f.neededGiB = c.Mul(f.sizeGiB, r)
	}
	return f
}

// schemeOf is checkpoint._scheme: the storage URI's scheme, lower-cased.
func schemeOf(ckpt map[string]any) (string, bool) {
	uri, ok := ckpt["storage_uri"].(string)
	if !ok {
		return "", false
	}
	parts := strings.Split(uri, "://")
	if len(parts) < 2 {
		return "", false
	}
	return strings.ToLower(parts[0]), true
}

func (f checkpointFacts) facts() map[string]any {
	out := map[string]any{}
	put(out, "computed_gib", f.computedGiB)
	put(out, "declared_gib", f.declaredGiB)
	put(out, "size_gib", f.sizeGiB)
	put(out, "size_gb", f.sizeGB)
	if f.hasTierName {
		out["tier"] = f.tierName
	}
	put(out, "write_seconds", f.writeSeconds)
	put(out, "resume_seconds", f.resumeSeconds)
	by := map[string]any{}
	for name, s := range f.resumeByTier {
		by[name] = s.JSON()
	}
	out["resume_seconds_by_tier"] = by
	put(out, "detection_seconds", f.detectionSeconds)
	put(out, "steps", f.steps)
	put(out, "step_seconds", f.stepSeconds)
	put(out, "interval_seconds", f.intervalSeconds)
	put(out, "stall_seconds", f.stallSeconds)
	put(out, "lost_seconds", f.lostSeconds)
	put(out, "world_size", f.worldSize)
	put(out, "lost_fraction", f.lostFraction)
	put(out, "goodput", f.goodput)
	if f.telemetry != "" {
		out["telemetry"] = f.telemetry
	}
	out["failure_rate_source"] = f.failureRateSource
	put(out, "gpu_hours_between_failures", f.gpuHoursBetweenFailures)
	out["write_bandwidth_source"] = f.writeBandwidthSource
	if f.hasStorageRegion {
		out["storage_region"] = f.storageRegion
	}
	put(out, "remote_write_gib", f.remoteWriteGiB)
	put(out, "quota_gib", f.quotaGiB)
	put(out, "needed_gib", f.neededGiB)
	var c regonum.Calc
	rounded := map[string]any{}
	put(rounded, "size_gib", round2(&c, f.sizeGiB))
	put(rounded, "write_seconds", round2(&c, f.writeSeconds))
	put(rounded, "resume_seconds", round2(&c, f.resumeSeconds))
	put(rounded, "interval_seconds", round2(&c, f.intervalSeconds))
	put(rounded, "lost_seconds", round2(&c, f.lostSeconds))
	put(rounded, "lost_fraction", c.Div(round2(&c, c.Mul(f.lostFraction, hundred)), hundred))
	put(rounded, "goodput", c.Div(round2(&c, c.Mul(f.goodput, hundred)), hundred))
	out["rounded"] = rounded
	return out
}

// telemetryFacts is the entitlement's telemetry claim as the checkpoint
// model reads it (checkpoint/facts.rego, "Signed telemetry"): its status,
// and when it is used, its interruption rate and write bandwidths.
type telemetryFacts struct {
	status  string      // none, malformed, stale, used; "" when undefined (now is no number)
	rate    regonum.Num // interruptions_per_gpu_hour, when used and present
	byTier  map[string]any
	hasTier bool // checkpoint_write_gbytes_per_s_per_node, when used and present
}

// write is the measured write bandwidth per node of tier, when used.
func (t telemetryFacts) write(tier string, ok bool) regonum.Num {
	if !ok || !t.hasTier {
		return regonum.Num{}
	}
	v, has := t.byTier[tier]
	return num(v, has)
}

var telemetryMeasures = []string{"interruptions_per_gpu_hour", "checkpoint_write_gbytes_per_s_per_node"}

func (m *Model) telemetry(c *regonum.Calc, in input) telemetryFacts {
	v, has := at(in.doc, "entitlement", "telemetry")
	if !has {
		return telemetryFacts{status: "none"}
	}
	t, isObj := v.(map[string]any)
	if !isObj || !m.validTelemetry(in, t) {
		return telemetryFacts{status: "malformed"}
	}
	now := num(at(in.doc, "now"))
	if !now.Defined() {
		return telemetryFacts{}
	}
	age := c.Sub(now, num(t["measured_at"], true))
	switch {
	case regonum.Greater(age, m.ckpt.telemetry.maxAge):
		return telemetryFacts{status: "stale"}
	case !regonum.LessEq(age, m.ckpt.telemetry.maxAge):
		return telemetryFacts{}
	}
	out := telemetryFacts{status: "used", rate: num(at(t, "interruptions_per_gpu_hour"))}
	out.byTier, out.hasTier = t["checkpoint_write_gbytes_per_s_per_node"].(map[string]any)
	return out
}

// validTelemetry is checkpoint._is_telemetry_valid for an object claim.
func (m *Model) validTelemetry(in input, t map[string]any) bool {
	cfg := m.ckpt.telemetry
	measures := 0
	for k := range t {
		switch k {
		case "measured_at", "window_seconds":
		case telemetryMeasures[0], telemetryMeasures[1]:
			measures++
		default:
			return false
		}
	}
	measuredAt, iat := count(at(t, "measured_at")), num(at(in.doc, "entitlement", "iat"))
	window := count(at(t, "window_seconds"))
	if measures == 0 || !regonum.LessEq(measuredAt, iat) || !regonum.GreaterEq(window, cfg.minWindow) {
		return false
	}
	inBounds := func(v any, lo, hi regonum.Num) bool {
		x := num(v, true)
		return regonum.GreaterEq(x, lo) && regonum.LessEq(x, hi)
	}
	if v, has := t["interruptions_per_gpu_hour"]; has && !inBounds(v, cfg.rateMin, cfg.rateMax) {
		return false
	}
	if v, has := t["checkpoint_write_gbytes_per_s_per_node"]; has {
		byTier, isObj := v.(map[string]any)
		if !isObj || len(byTier) == 0 {
			return false
		}
		for tier, gbytes := range byTier {
			if _, known := m.storage[tier]; !known || !inBounds(gbytes, cfg.writeMin, cfg.writeMax) {
				return false
			}
		}
	}
	return true
}
