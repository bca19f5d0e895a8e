package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// AdmissionPolicyCodes maps each ValidatingAdmissionPolicy shipped beside
// the webhook (deploy/kubernetes/base/admissionpolicies.yaml) to the stable
// code every refusal of it leads its message with. The kube-apiserver
// evaluates them itself, with no call to itogate, so they hold while
// itogate is down (docs/kubernetes.md).
var AdmissionPolicyCodes = map[string]api.Code{
	"itogate-workload-delete":  api.CodeWorkloadOrphaningDelete,
	"itogate-namespace-labels": api.CodeNamespaceLabelGuarded,
	TicketedPodsPolicy:         api.CodeWorkloadPodMetadataGuarded,
	"itogate-gpu-tolerations":  api.CodeWorkloadGPUTolerationUncontrolled,
	PodDeletionPolicy:          api.CodeWorkloadDeleteGraceTooLong,
	DeviceAnnotationsPolicy:    api.CodeWorkloadDeviceAnnotationGuarded,
}

// The policies AdmissionPolicies generates a variable of, and those
// variables: TicketedPodsPolicy keeps a ticketed Pod's labels,
// ownerReferences and ticket annotation from anyone but a listed
// controller or a cluster admin (ControllersVariable: the controller
// identities); PodDeletionPolicy refuses a Pod DELETE or eviction asking
// for a longer grace period than the bundle allows (MaxGraceVariable);
// DeviceAnnotationsPolicy refuses a Pod UPDATE that adds a device-injecting
// annotation or changes its value (DeviceAnnotationPrefixesVariable and
// DeviceAnnotationKeysVariable: the bundle's device_annotation_prefixes and
// device_annotation_keys).
const (
	TicketedPodsPolicy               = "itogate-ticketed-pods"
	ControllersVariable              = "controllers"
	PodDeletionPolicy                = "itogate-pod-deletion"
	MaxGraceVariable                 = "maxGraceSeconds"
	DeviceAnnotationsPolicy          = "itogate-pod-device-annotations"
	DeviceAnnotationPrefixesVariable = "devicePrefixes"
	DeviceAnnotationKeysVariable     = "deviceKeys"
)

// deploymentModel is what AdmissionPolicies reads of data.ito.config.workload.
type deploymentModel struct {
	Controllers struct {
		Users map[string]string `json:"users"`
	} `json:"controllers"`
	MaxTerminationGraceSeconds json.RawMessage `json:"max_termination_grace_seconds"`
	DeviceAnnotationPrefixes   []string        `json:"device_annotation_prefixes"`
	DeviceAnnotationKeys       []string        `json:"device_annotation_keys"`
}

func readDeploymentModel(bundle fs.FS) (deploymentModel, error) {
	var m deploymentModel
	raw, err := fs.ReadFile(bundle, ResourceModelPath)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("%s: %w", ResourceModelPath, err)
	}
	return m, nil
}

// ControllerIdentities are the identities (userInfo.username) the bundle
// lists as workload controllers (data.ito.config.workload.controllers.users,
// ResourceModelPath), sorted: the webhook admits children only from them.
// A bundle without the list, or listing none, is an error.
func ControllerIdentities(bundle fs.FS) ([]string, error) {
	m, err := readDeploymentModel(bundle)
	if err != nil {
		return nil, fmt.Errorf("controller identities: %w", err)
	}
	if len(m.Controllers.Users) == 0 {
		return nil, fmt.Errorf("controller identities: %s lists no controllers.users", ResourceModelPath)
	}
	ids := make([]string, 0, len(m.Controllers.Users))
	for id := range m.Controllers.Users {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// MaxGraceSeconds is the bundle's bound on a GPU Pod's termination grace
// period (data.ito.config.workload.max_termination_grace_seconds, in
// seconds): the policy refuses a longer terminationGracePeriodSeconds, the
// apiserver's PodDeletionPolicy a longer DELETE or eviction. A bundle
// without it, or with a value that is not an integer in [1, 2^31), is an
// error.
func MaxGraceSeconds(bundle fs.FS) (int64, error) {
	m, err := readDeploymentModel(bundle)
	if err != nil {
		return 0, fmt.Errorf("max grace seconds: %w", err)
	}
	if m.MaxTerminationGraceSeconds == nil {
		return 0, fmt.Errorf("max grace seconds: %s has no max_termination_grace_seconds", ResourceModelPath)
	}
	// A JSON integer as written: not a string, a fraction or an exponent.
	n, err := strconv.ParseInt(string(m.MaxTerminationGraceSeconds), 10, 64)
	if err != nil || n < 1 || n >= 1<<31 {
		return 0, fmt.Errorf("max grace seconds: %s: max_termination_grace_seconds %s is not an integer in [1, 2^31)",
			ResourceModelPath, m.MaxTerminationGraceSeconds)
	}
	return n, nil
}

// DeviceAnnotations are the bundle's device-injecting Pod annotations
// (data.ito.config.workload, ResourceModelPath), as the policy reads them
// (_device_annotation): prefixes, a key under which injects devices
// (device_annotation_prefixes), and keys that do (device_annotation_keys,
// and every prefix without its trailing slash), each sorted, without
// duplicates. A bundle listing neither is an error, as is an empty prefix
// (the policy would take every annotation for one) or key: the apiserver's
// DeviceAnnotationsPolicy would not guard what the policy refuses.
func DeviceAnnotations(bundle fs.FS) (prefixes, keys []string, err error) {
	m, err := readDeploymentModel(bundle)
	if err != nil {
		return nil, nil, fmt.Errorf("device annotations: %w", err)
	}
	for _, p := range m.DeviceAnnotationPrefixes {
		if p == "" {
			return nil, nil, fmt.Errorf("device annotations: %s: an empty device_annotation_prefixes entry", ResourceModelPath)
		}
		prefixes = append(prefixes, p)
		if k := strings.TrimSuffix(p, "/"); k != "" {
			keys = append(keys, k)
		}
	}
	for _, k := range m.DeviceAnnotationKeys {
		if k == "" {
			return nil, nil, fmt.Errorf("device annotations: %s: an empty device_annotation_keys entry", ResourceModelPath)
		}
		keys = append(keys, k)
	}
	if len(prefixes) == 0 && len(keys) == 0 {
		return nil, nil, fmt.Errorf("device annotations: %s lists no device_annotation_prefixes or device_annotation_keys", ResourceModelPath)
	}
	slices.Sort(prefixes)
	slices.Sort(keys)
	return slices.Compact(prefixes), slices.Compact(keys), nil
}

// AdmissionPolicies is the admission policies file (YAML, a stream of
// ValidatingAdmissionPolicies and bindings, comments kept) with the
// variables it generates from the bundle set: ControllersVariable of
// TicketedPodsPolicy to the CEL list of ControllerIdentities(bundle), so
// the apiserver lets the same identities change a ticketed Pod's ownership
// that the webhook trusts to create children, and MaxGraceVariable of
// PodDeletionPolicy to MaxGraceSeconds(bundle), so a DELETE keeps the
// bound the policy holds pod templates to; and
// DeviceAnnotationPrefixesVariable and DeviceAnnotationKeysVariable of
// DeviceAnnotationsPolicy to the CEL lists of DeviceAnnotations(bundle), so
// the apiserver guards on a running Pod the annotations the policy refuses
// at admission. It is what `itogate webhook policies` prints and
// deploy/kubernetes ships. An identity, prefix or key must be printable
// ASCII; a template without exactly one of each policy's variable is an
// error.
func AdmissionPolicies(template []byte, bundle fs.FS) ([]byte, error) {
	ids, err := ControllerIdentities(bundle)
	if err != nil {
		return nil, err
	}
	controllers, err := celStrings("controller identity", ids)
	if err != nil {
		return nil, err
	}
	grace, err := MaxGraceSeconds(bundle)
	if err != nil {
		return nil, err
	}
	prefixes, keys, err := DeviceAnnotations(bundle)
	if err != nil {
		return nil, err
	}
	prefixList, err := celStrings("device annotation prefix", prefixes)
	if err != nil {
		return nil, err
	}
	keyList, err := celStrings("device annotation key", keys)
	if err != nil {
		return nil, err
	}
	gen := []generated{
		{TicketedPodsPolicy, ControllersVariable, controllers},
		{PodDeletionPolicy, MaxGraceVariable, strconv.FormatInt(grace, 10)},
		{DeviceAnnotationsPolicy, DeviceAnnotationPrefixesVariable, prefixList},
		{DeviceAnnotationsPolicy, DeviceAnnotationKeysVariable, keyList},
	}

	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(template))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("admission policies: %w", err)
		}
		docs = append(docs, &doc)
	}
	for _, g := range gen {
		set := 0
		for _, doc := range docs {
			n, err := g.apply(doc)
			if err != nil {
				return nil, err
			}
			set += n
		}
		if set != 1 {
			return nil, fmt.Errorf("admission policies: want one variable %s in policy %s, found %d",
				g.variable, g.policy, set)
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	for _, doc := range docs {
		if err := enc.Encode(doc); err != nil {
			return nil, fmt.Errorf("admission policies: %w", err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("admission policies: %w", err)
	}
	return out.Bytes(), nil
}

// celStrings is ss as a CEL list of single-quoted string literals; what
// names each for an error. A string that is empty or not printable ASCII
// is an error.
func celStrings(what string, ss []string) (string, error) {
	lits := make([]string, len(ss))
	for i, s := range ss {
		if !printable(s) || s == "" {
			return "", fmt.Errorf("admission policies: %s %q is not printable ASCII", what, s)
		}
		lits[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	return "[" + strings.Join(lits, ", ") + "]", nil
}

// generated is one variable of one policy AdmissionPolicies writes: its
// CEL expression.
type generated struct {
	policy, variable, expression string
}

// apply sets g's variable in doc when doc is g's policy, and says how many
// it set.
func (g generated) apply(doc *yaml.Node) (int, error) {
	if len(doc.Content) != 1 {
		return 0, nil
	}
	root := doc.Content[0]
	if scalar(child(root, "kind")) != "ValidatingAdmissionPolicy" ||
		scalar(child(child(root, "metadata"), "name")) != g.policy {
		return 0, nil
	}
	vars := child(child(root, "spec"), "variables")
	if vars == nil || vars.Kind != yaml.SequenceNode {
		return 0, nil
	}
	set := 0
	for _, v := range vars.Content {
		if scalar(child(v, "name")) != g.variable {
			continue
		}
		e := child(v, "expression")
		if e == nil || e.Kind != yaml.ScalarNode {
			return 0, fmt.Errorf("admission policies: %s: variable %s has no expression", g.policy, g.variable)
		}
		e.Value, e.Tag, e.Style = g.expression, "!!str", yaml.DoubleQuotedStyle
		set++
	}
	return set, nil
}

// child is the value of key in mapping node m (nil when absent).
func child(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// scalar is n's value when n is a scalar ("" otherwise).
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// printable: every byte of s is printable ASCII.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}
