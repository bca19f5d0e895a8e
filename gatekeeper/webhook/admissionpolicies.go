package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
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
}

// TicketedPodsPolicy is the ValidatingAdmissionPolicy that keeps a
// ticketed Pod's labels, ownerReferences and ticket annotation from anyone
// but a listed controller or a cluster admin; ControllersVariable is its
// variable AdmissionPolicies generates from the bundle.
const (
	TicketedPodsPolicy  = "itogate-ticketed-pods"
	ControllersVariable = "controllers"
)

// controllerList is what AdmissionPolicies reads of data.ito.config.workload.
type controllerList struct {
	Controllers struct {
		Users map[string]string `json:"users"`
	} `json:"controllers"`
}

// ControllerIdentities are the identities (userInfo.username) the bundle
// lists as workload controllers (data.ito.config.workload.controllers.users,
// ResourceModelPath), sorted: the webhook admits children only from them.
// A bundle without the list, or listing none, is an error.
func ControllerIdentities(bundle fs.FS) ([]string, error) {
	raw, err := fs.ReadFile(bundle, ResourceModelPath)
	if err != nil {
		return nil, fmt.Errorf("controller identities: %w", err)
	}
	var c controllerList
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("controller identities: %s: %w", ResourceModelPath, err)
	}
	if len(c.Controllers.Users) == 0 {
		return nil, fmt.Errorf("controller identities: %s lists no controllers.users", ResourceModelPath)
	}
	ids := make([]string, 0, len(c.Controllers.Users))
	for id := range c.Controllers.Users {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// AdmissionPolicies is the admission policies file (YAML, a stream of
// ValidatingAdmissionPolicies and bindings, comments kept) with the
// variable ControllersVariable of TicketedPodsPolicy set to the CEL list of
// ControllerIdentities(bundle): what `itogate webhook policies` prints and
// deploy/kubernetes ships, so the apiserver lets the same identities
// change a ticketed Pod's ownership that the webhook trusts to create
// children. An identity must be printable ASCII; a template without that
// policy or variable is an error.
func AdmissionPolicies(template []byte, bundle fs.FS) ([]byte, error) {
	ids, err := ControllerIdentities(bundle)
	if err != nil {
		return nil, err
	}
	lits := make([]string, len(ids))
	for i, id := range ids {
		if !printable(id) || id == "" {
			return nil, fmt.Errorf("admission policies: controller identity %q is not printable ASCII", id)
		}
		lits[i] = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(id) + "'"
	}
	list := "[" + strings.Join(lits, ", ") + "]"

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
	set := 0
	for _, doc := range docs {
		if len(doc.Content) != 1 {
			continue
		}
		root := doc.Content[0]
		if scalar(child(root, "kind")) != "ValidatingAdmissionPolicy" ||
			scalar(child(child(root, "metadata"), "name")) != TicketedPodsPolicy {
			continue
		}
		vars := child(child(root, "spec"), "variables")
		if vars == nil || vars.Kind != yaml.SequenceNode {
			continue
		}
		for _, v := range vars.Content {
			if scalar(child(v, "name")) != ControllersVariable {
				continue
			}
			e := child(v, "expression")
			if e == nil || e.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("admission policies: %s: variable %s has no expression", TicketedPodsPolicy, ControllersVariable)
			}
			e.Value, e.Tag, e.Style = list, "!!str", yaml.DoubleQuotedStyle
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("admission policies: want one variable %s in policy %s, found %d",
			ControllersVariable, TicketedPodsPolicy, set)
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
