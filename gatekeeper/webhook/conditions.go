package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// The bundle files MatchConditions reads.
const (
	KindsTablePath    = "ito/tables/workloads/data.json"
	ResourceModelPath = "ito/config/workload/data.json"
)

// kindsTable is what MatchConditions reads of data.ito.tables.workloads.
type kindsTable struct {
	TicketAnnotation string `json:"ticket_annotation"`
	Kinds            map[string]struct {
		Resource string `json:"resource"`
		PodSets  []struct {
			Each []string `json:"each"`
			Path []string `json:"path"`
		} `json:"pod_sets"`
		ClaimSets []json.RawMessage `json:"claim_sets"`
	} `json:"kinds"`
}

// resourceModel is what MatchConditions reads of data.ito.config.workload.
type resourceModel struct {
	GPUResources struct {
		Names    []string `json:"names"`
		Prefixes []string `json:"prefixes"`
	} `json:"gpu_resources"`
	DRA struct {
		ExtendedResourcePrefix string `json:"extended_resource_prefix"`
	} `json:"dra"`
	DeviceEnv struct {
		Names []string `json:"names"`
	} `json:"device_env"`
	DeviceMountPaths         []string `json:"device_mount_paths"`
	DeviceAnnotationPrefixes []string `json:"device_annotation_prefixes"`
	DeviceAnnotationKeys     []string `json:"device_annotation_keys"`
	MaxCount                 int64    `json:"max_count"`
}

// MatchConditions derives the CEL matchConditions of the webhook from a
// policy bundle (its kinds table and resource model, KindsTablePath and
// ResourceModelPath): the apiserver then sends a review only when the
// policy could refuse it or bind something, so objects without GPUs are
// admitted with itogate down. Every condition must hold for a review to be
// sent (the apiserver's rule); a condition that fails to evaluate refuses
// the object under failurePolicy: Fail.
//
//   - not-a-system-namespace: never a kube-* namespace.
//   - changes-what-runs: an UPDATE of an object (no subresource) is sent
//     unless its spec is the stored one's (a top-level suspend set to true
//     excepted), with the same ticket annotation and ownerReferences, and,
//     of a Pod, no device annotation (as below) added or changed in value:
//     a finalizer, label or other annotation change, a device annotation's
//     removal, or a suspend, goes through without itogate (the policy
//     allows those too, teardown).
//   - pod-update-sets-devices: a Pod UPDATE (no subresource) is sent only
//     when it adds a device annotation or changes its value (the rules
//     route Pod UPDATEs for that alone: the apiserver's
//     itogate-pod-device-annotations refuses the same to tenants first).
//   - scale-up: a <kind>/scale UPDATE is sent unless it lowers or keeps a
//     count within 0…max_count.
//   - gpu-<resource>.<group>, one per kind with pod templates: a CREATE
//     or UPDATE (or pods/ephemeralcontainers) is sent when the object or
//     any pod template the table finds in it carries the ticket annotation
//     or a device annotation (a key of device_annotation_keys, a key under a
//     device_annotation_prefixes entry, or the entry without its trailing
//     slash), or any container (init and ephemeral included) asks for a GPU resource of the model (names and prefixes,
//     the `not` exceptions ignored, and every DRA extended resource) by
//     request or limit, sets a device variable (any value), is privileged
//     or mounts a path holding a device mount path's last segment (the
//     policy matches the cleaned path by string prefix, and cleaning keeps
//     every segment it does not drop whole, so such a path holds it), or the
//     Pod names any DRA claim or has any hostPath volume.
//
// DRA claims and templates, DELETE and any kind the table lacks are always
// sent. The conditions over-approximate the policy (TestMatchConditions
// holds them to it). Names the bundle gives must be printable ASCII.
func MatchConditions(bundle fs.FS) ([]admissionregistrationv1.MatchCondition, error) {
	var table kindsTable
	var model resourceModel
	for path, into := range map[string]any{KindsTablePath: &table, ResourceModelPath: &model} {
		raw, err := fs.ReadFile(bundle, path)
		if err != nil {
			return nil, fmt.Errorf("webhook conditions: %w", err)
		}
		if err := json.Unmarshal(raw, into); err != nil {
			return nil, fmt.Errorf("webhook conditions: %s: %w", path, err)
		}
	}
	if table.TicketAnnotation == "" || len(table.Kinds) == 0 || model.MaxCount <= 0 {
		return nil, errors.New("webhook conditions: the bundle has no ticket annotation, no kinds or no max_count")
	}
	g := &gen{}
	resource := g.any("r", model.GPUResources.Names, append(slices.Clone(model.GPUResources.Prefixes), model.DRA.ExtendedResourcePrefix))
	var segments []string
	for _, p := range model.DeviceMountPaths {
		if seg := lastSegment(p); !slices.Contains(segments, seg) {
			segments = append(segments, seg)
		}
	}
	container := or(
		"(\"resources\" in c && ((\"limits\" in c.resources && c.resources.limits.exists(r, "+resource+")) || "+
			"(\"requests\" in c.resources && c.resources.requests.exists(r, "+resource+"))))",
		"(\"env\" in c && c.env.exists(e, \"name\" in e && e.name in "+g.list(model.DeviceEnv.Names)+"))",
		"(\"securityContext\" in c && \"privileged\" in c.securityContext && c.securityContext.privileged == true)",
		"(\"volumeMounts\" in c && c.volumeMounts.exists(m, \"mountPath\" in m && ("+g.contains("m.mountPath", segments)+")))",
	)
	podSpec := func(s string) string {
		var parts []string
		for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
			parts = append(parts, fmt.Sprintf("(\"%s\" in %s && %s.%s.exists(c, %s))", list, s, s, list, container))
		}
		return or(append(parts,
			fmt.Sprintf("(\"resourceClaims\" in %s && size(%s.resourceClaims) > 0)", s, s),
			fmt.Sprintf("(\"volumes\" in %s && %s.volumes.exists(v, \"hostPath\" in v))", s, s))...)
	}
	keys := slices.Clone(model.DeviceAnnotationKeys)
	for _, p := range model.DeviceAnnotationPrefixes {
		if k := strings.TrimSuffix(p, "/"); k != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	annotated := func(m string) string {
		return fmt.Sprintf("(\"annotations\" in %s && %s.annotations.exists(a, %s))", m, m,
			or("a == "+g.lit(table.TicketAnnotation), g.any("a", keys, model.DeviceAnnotationPrefixes)))
	}
	ticket := func(o string) string {
		return fmt.Sprintf("((\"metadata\" in %s && \"annotations\" in %s.metadata && %s in %s.metadata.annotations) ? %s.metadata.annotations[%s] : \"\")",
			o, o, g.lit(table.TicketAnnotation), o, o, g.lit(table.TicketAnnotation))
	}
	owners := func(o string) string {
		return fmt.Sprintf("((\"metadata\" in %s && \"ownerReferences\" in %s.metadata) ? %s.metadata.ownerReferences : [])", o, o, o)
	}
	same := "((\"spec\" in object) == (\"spec\" in oldObject) && (!(\"spec\" in object) || (" +
		"object.spec.all(k, k in oldObject.spec ? (object.spec[k] == oldObject.spec[k] || (k == \"suspend\" && object.spec[k] == true)) : (k == \"suspend\" && object.spec[k] == true)) && " +
		"oldObject.spec.all(k, k in object.spec))) && " + ticket("object") + " == " + ticket("oldObject") + " && " +
		owners("object") + " == " + owners("oldObject") + ")"
	// A Pod UPDATE that adds a device annotation or changes its value: the
	// kubelet and NRI plugins read them again when the sandbox is re-created.
	anns := func(o string) string {
		return fmt.Sprintf("((\"metadata\" in %s && \"annotations\" in %s.metadata) ? %s.metadata.annotations : {})", o, o, o)
	}
	devicesSet := fmt.Sprintf("(request.resource.group == \"\" && request.resource.resource == \"pods\" && "+
		"%s.exists(a, %s && !(a in %s && %s[a] == %s[a])))",
		anns("object"), g.any("a", keys, model.DeviceAnnotationPrefixes), anns("oldObject"), anns("oldObject"), anns("object"))
	out := []admissionregistrationv1.MatchCondition{
		{Name: "not-a-system-namespace", Expression: `!request.namespace.startsWith("kube-")`},
		{Name: "changes-what-runs", Expression: "request.operation != \"UPDATE\" || " + subResource + " != \"\" || !" + same +
			"\n|| " + devicesSet},
		{Name: "pod-update-sets-devices", Expression: "!(request.operation == \"UPDATE\" && request.resource.group == \"\" && " +
			"request.resource.resource == \"pods\" && " + subResource + " == \"\") || " + devicesSet},
		{Name: "scale-up", Expression: fmt.Sprintf(subResource+" != \"scale\" || !(\"spec\" in object && \"replicas\" in object.spec && "+
			"\"spec\" in oldObject && \"replicas\" in oldObject.spec && object.spec.replicas >= 0 && "+
			"object.spec.replicas <= oldObject.spec.replicas && oldObject.spec.replicas <= %d)", model.MaxCount)},
	}
	for _, key := range slices.Sorted(maps.Keys(table.Kinds)) {
		k := table.Kinds[key]
		if len(k.PodSets) == 0 {
			continue
		}
		group, _, _ := strings.Cut(key, "/")
		if k.Resource == "" {
			return nil, fmt.Errorf("webhook conditions: kind %s names no resource", key)
		}
		sends := []string{annotated("object.metadata")}
		for _, set := range k.PodSets {
			if len(set.Path) == 0 {
				return nil, fmt.Errorf("webhook conditions: kind %s: a pod set without a path", key)
			}
			meta := append(slices.Clone(set.Path[:len(set.Path)-1]), "metadata")
			pod := func(base string) string {
				specGuard, spec := g.walk(base, set.Path)
				expr := "(" + specGuard + " && " + podSpec(spec) + ")"
				if len(set.Each) > 0 || len(meta) > 1 {
					metaGuard, m := g.walk(base, meta)
					expr = or(expr, "("+metaGuard+" && "+annotated(m)+")")
				}
				return expr
			}
			if len(set.Each) == 0 {
				sends = append(sends, pod("object"))
				continue
			}
			eachGuard, each := g.walk("object", set.Each)
			sends = append(sends, fmt.Sprintf("(%s && %s.exists(i, x, %s))", eachGuard, each, pod("x")))
		}
		name := "gpu-" + k.Resource
		if group != "" {
			name += "." + group
		}
		out = append(out, admissionregistrationv1.MatchCondition{Name: name, Expression: fmt.Sprintf(
			"!(request.resource.group == %s && request.resource.resource == %s) || "+subResource+" == \"scale\" || "+
				"request.operation == \"DELETE\" || %s", g.lit(group), g.lit(k.Resource), or(sends...))})
	}
	if g.err != nil {
		return nil, g.err
	}
	return out, nil
}

// subResource is the request's subresource, "" for none (the request
// variable omits an empty one).
const subResource = "(has(request.subResource) ? request.subResource : \"\")"

// gen writes CEL; its first error (a bundle name that is no printable
// ASCII) is kept.
type gen struct{ err error }

// lit is s as a CEL string literal.
func (g *gen) lit(s string) string {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			if g.err == nil {
				g.err = fmt.Errorf("webhook conditions: %q is not printable ASCII", s)
			}
			return `""`
		}
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func (g *gen) list(ss []string) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = g.lit(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// any is: v is one of names or starts with one of prefixes.
func (g *gen) any(v string, names, prefixes []string) string {
	var parts []string
	if len(names) > 0 {
		parts = append(parts, v+" in "+g.list(names))
	}
	for _, p := range prefixes {
		if p != "" {
			parts = append(parts, v+".startsWith("+g.lit(p)+")")
		}
	}
	if len(parts) == 0 {
		return "false"
	}
	return "(" + strings.Join(parts, " || ") + ")"
}

// contains is: v holds one of subs (an empty one matches every v).
func (g *gen) contains(v string, subs []string) string {
	var parts []string
	for _, s := range subs {
		if s == "" {
			return "true"
		}
		parts = append(parts, v+".contains("+g.lit(s)+")")
	}
	if len(parts) == 0 {
		return "false"
	}
	return strings.Join(parts, " || ")
}

// walk is the guard that every member of path exists below base, and the
// expression of the last one.
func (g *gen) walk(base string, path []string) (guard, expr string) {
	var guards []string
	expr = base
	for _, p := range path {
		guards = append(guards, g.lit(p)+" in "+expr)
		expr += "[" + g.lit(p) + "]"
	}
	return "(" + strings.Join(guards, " && ") + ")", expr
}

// lastSegment is the last non-empty segment of a slash path ("" for "/").
func lastSegment(p string) string {
	segs := strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
	if len(segs) == 0 {
		return ""
	}
	return segs[len(segs)-1]
}

// or joins alternatives one to a line, for the YAML's literal blocks.
func or(parts ...string) string { return "(" + strings.Join(parts, "\n|| ") + ")" }

// configurationHeader leads the configuration Configuration writes.
const configurationHeader = `# Generated by ` + "`itogate webhook config`" + ` from this file and the policy bundle
# (its kinds table and resource model): edit the rest, then regenerate; a
# test keeps the shipped file equal to its regeneration.
#
# Fail closed: with itogate unreachable, slow or answering garbage, the
# apiserver refuses what it sends (failurePolicy: Fail). timeoutSeconds (5)
# is well below the apiserver's own request timeout (60 s) and above
# itogate's own review bound (webhook.timeout, 2 s), so itogate answers with
# a code before the apiserver gives up.
#
# What is sent (docs/kubernetes.md): namespaces labelled itogate.io/enforce,
# never kube-* or itogate's own (namespaceSelector and the first
# matchCondition); the rules' kinds and verbs (every kind of the bundle's
# table: CREATE and UPDATE, a DRA claim or template CREATE only, a Pod's
# UPDATE only when it adds or changes a device annotation, the scale
# subresource of every custom workload kind, pods/ephemeralcontainers); and
# of those only what the policy could refuse: the matchConditions, generated
# from the bundle's resource model. Objects without GPUs are admitted with
# itogate down.
#
# warn.workloads.itogate.io is the opt-in warn mode, for namespaces labelled
# itogate.io/enforce=warn by a cluster admin: the same reviews on
# /validate-warn, answered allowed with what enforcement would refuse as
# warnings, nothing bound; failurePolicy: Ignore, it never refuses.
`

// Configuration is the ValidatingWebhookConfiguration template (YAML, one
// document) with every webhook's matchConditions replaced by
// MatchConditions(bundle), as YAML led by a header comment: what
// `itogate webhook config` prints and deploy/kubernetes ships.
func Configuration(template []byte, bundle fs.FS) ([]byte, error) {
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(template, &vwc); err != nil {
		return nil, fmt.Errorf("webhook configuration: %w", err)
	}
	if vwc.Kind != "ValidatingWebhookConfiguration" || len(vwc.Webhooks) == 0 {
		return nil, errors.New("webhook configuration: not a ValidatingWebhookConfiguration with webhooks")
	}
	conds, err := MatchConditions(bundle)
	if err != nil {
		return nil, err
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].MatchConditions = conds
	}
	out, err := yaml.Marshal(&vwc)
	if err != nil {
		return nil, fmt.Errorf("webhook configuration: %w", err)
	}
	return append([]byte(configurationHeader), out...), nil
}
