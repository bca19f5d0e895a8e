package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	k8syaml "sigs.k8s.io/yaml"
)

// The shipped ValidatingAdmissionPolicies, evaluated in Go by the
// apiserver's own CEL machinery (k8s.io/apiserver, the library the
// kube-apiserver runs them with): the variables, matchConditions,
// validations and messageExpressions compile and evaluate as they would in
// the apiserver. Matching (resource rules, namespaceSelector) is this
// file's own, small, and covered on a real apiserver by `make test-k8s`.

// shippedPolicies reads kubernetes/base/admissionpolicies.yaml: its
// policies and bindings by name.
func shippedPolicies(t *testing.T) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy,
	map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("kubernetes", "base", "admissionpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return parsePolicies(t, raw)
}

func parsePolicies(t *testing.T, raw []byte) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy,
	map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	vaps := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	bindings := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, doc := range splitDocs(t, raw) {
		var head metav1.TypeMeta
		if err := k8syaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := k8syaml.UnmarshalStrict(doc, &p); err != nil {
				t.Fatal(err)
			}
			vaps[p.Name] = &p
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if err := k8syaml.UnmarshalStrict(doc, &b); err != nil {
				t.Fatal(err)
			}
			bindings[b.Name] = &b
		default:
			t.Fatalf("unexpected document of kind %q", head.Kind)
		}
	}
	return vaps, bindings
}

// splitDocs splits a YAML stream into its documents (as JSON).
func splitDocs(t *testing.T, raw []byte) [][]byte {
	t.Helper()
	var docs [][]byte
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc runtime.RawExtension
		if err := r.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc.Raw)) > 0 && string(doc.Raw) != "null" {
			docs = append(docs, doc.Raw)
		}
	}
}

// apiRequest is one request as the apiserver's admission sees it.
type apiRequest struct {
	group, version, kind, resource, sub string
	kindGroup                           string // the kind's group when not the resource's (pods/eviction: policy)
	op                                  admission.Operation
	ns                                  string
	nsLabels                            map[string]string
	name                                string
	obj, old                            map[string]any
	user                                string
	groups                              []string
	options                             runtime.Object // *metav1.DeleteOptions, CreateOptions, UpdateOptions
}

// verdict is a policy's answer: refused with message, or admitted (matched
// says whether the policy applied at all).
type verdict struct {
	matched bool
	refused bool
	reason  metav1.StatusReason
	message string
}

// evaluate runs policy p, bound by b, on r the way the kube-apiserver's
// ValidatingAdmissionPolicy plugin does (validating/plugin.go compilePolicy,
// validator.go Validate): variables compiled and stored, then the
// matchConditions, then each validation, its messageExpression the
// refusal's message. A compile or evaluation error fails the test: under
// failurePolicy: Fail it would refuse whatever the policy matches.
func evaluate(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy,
	b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, r apiRequest) verdict {
	t.Helper()
	if !matches(t, p.Spec.MatchConstraints, r) || (b.Spec.MatchResources != nil && !matches(t, b.Spec.MatchResources, r)) {
		return verdict{}
	}
	if p.Spec.ParamKind != nil {
		t.Fatalf("%s: params are not evaluated here", p.Name)
	}
	gvk := schema.GroupVersionKind{Group: r.group, Version: r.version, Kind: r.kind}
	if r.kindGroup != "" {
		gvk.Group = r.kindGroup
	}
	var obj, old runtime.Object
	if r.obj != nil {
		u := &unstructured.Unstructured{Object: r.obj}
		u.SetGroupVersionKind(gvk)
		obj = u
	}
	if r.old != nil {
		u := &unstructured.Unstructured{Object: r.old}
		u.SetGroupVersionKind(gvk)
		old = u
	}
	options := r.options
	if options == nil {
		switch r.op {
		case admission.Create:
			options = &metav1.CreateOptions{}
		case admission.Update:
			options = &metav1.UpdateOptions{}
		}
	}
	gvr := schema.GroupVersionResource{Group: r.group, Version: r.version, Resource: r.resource}
	attr := admission.NewAttributesRecord(obj, old, gvk, r.ns, r.name, gvr, r.sub, r.op, options, false,
		&user.DefaultInfo{Name: r.user, Groups: r.groups})
	va, err := admission.NewVersionedAttributes(attr, gvk, nil)
	if err != nil {
		t.Fatal(err)
	}

	vars := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	named := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		named[i] = &celExpr{name: v.Name, expr: v.Expression, returns: []*cel.Type{cel.AnyType}}
	}
	compiler.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
	if len(p.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		filter := compiler.CompileCondition(conds, vars, environment.StoredExpressions)
		if errs := filter.CompilationErrors(); len(errs) > 0 {
			t.Fatalf("%s: matchConditions do not compile: %v", p.Name, errs)
		}
		m := matchconditions.NewMatcher(filter, p.Spec.FailurePolicy, "policy", "validate", p.Name).
			Match(t.Context(), va, nil, nil)
		if m.Error != nil {
			t.Fatalf("%s: matchConditions fail to evaluate: %v", p.Name, m.Error)
		}
		if !m.Matches {
			return verdict{}
		}
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &celExpr{expr: v.Expression, returns: []*cel.Type{cel.BoolType}}
		messages[i] = &celExpr{expr: v.MessageExpression, returns: []*cel.Type{cel.StringType}}
		if v.MessageExpression == "" {
			messages[i] = &celExpr{expr: "''", returns: []*cel.Type{cel.StringType}}
		}
	}
	request := plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	ns := plugincel.CreateNamespaceObject(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: namespaceLabels(r)}})
	run := func(exprs []plugincel.ExpressionAccessor, decl plugincel.OptionalVariableDeclarations) []plugincel.EvaluationResult {
		f := compiler.CompileCondition(exprs, decl, environment.StoredExpressions)
		if errs := f.CompilationErrors(); len(errs) > 0 {
			t.Fatalf("%s: does not compile: %v", p.Name, errs)
		}
		res, _, err := f.ForInput(t.Context(), va, request, plugincel.OptionalVariableBindings{}, ns, celconfig.RuntimeCELCostBudget)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for _, r := range res {
			if r.Error != nil {
				t.Fatalf("%s: %q fails to evaluate: %v", p.Name, r.ExpressionAccessor.GetExpression(), r.Error)
			}
		}
		return res
	}
	verdicts := run(validations, vars)
	msgs := run(messages, plugincel.OptionalVariableDeclarations{})
	v := verdict{matched: true}
	for i, res := range verdicts {
		if res.EvalResult == types.True {
			continue
		}
		if res.EvalResult != types.False {
			t.Fatalf("%s: validation %d is not a bool: %v", p.Name, i, res.EvalResult)
		}
		msg, _ := msgs[i].EvalResult.Value().(string)
		if msg == "" || strings.ContainsAny(msg, "\n") || len(msg) > celconfig.MaxEvaluatedMessageExpressionSizeBytes {
			t.Fatalf("%s: validation %d: message %q is one the apiserver would drop", p.Name, i, msg)
		}
		if !v.refused {
			v.refused, v.message = true, msg
			if reason := p.Spec.Validations[i].Reason; reason != nil {
				v.reason = *reason
			} else {
				v.reason = metav1.StatusReasonInvalid
			}
		}
	}
	return v
}

// celExpr is one CEL expression of a policy.
type celExpr struct {
	name, expr string
	returns    []*cel.Type
}

func (e *celExpr) GetExpression() string    { return e.expr }
func (e *celExpr) ReturnTypes() []*cel.Type { return e.returns }
func (e *celExpr) GetName() string          { return e.name }

// namespaceLabels are the request's namespace's labels, with the one the
// apiserver sets on every namespace.
func namespaceLabels(r apiRequest) map[string]string {
	l := map[string]string{"kubernetes.io/metadata.name": r.ns}
	for k, v := range r.nsLabels {
		l[k] = v
	}
	return l
}

// matches: m's resource rules and namespace selector select r (the
// apiserver's matching, for the fields the shipped policies use).
func matches(t *testing.T, m *admissionregistrationv1.MatchResources, r apiRequest) bool {
	t.Helper()
	if m == nil {
		return false
	}
	if m.ObjectSelector != nil && (len(m.ObjectSelector.MatchLabels) > 0 || len(m.ObjectSelector.MatchExpressions) > 0) {
		t.Fatal("objectSelector is not evaluated here")
	}
	if len(m.ExcludeResourceRules) > 0 {
		t.Fatal("excludeResourceRules are not evaluated here")
	}
	if m.NamespaceSelector != nil && r.ns != "" {
		sel, err := metav1.LabelSelectorAsSelector(m.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(namespaceLabels(r))) {
			return false
		}
	}
	resource := r.resource
	if r.sub != "" {
		resource += "/" + r.sub
	}
	for _, rule := range m.ResourceRules {
		if in(rule.Operations, admissionregistrationv1.OperationType(r.op), admissionregistrationv1.OperationAll) &&
			in(rule.APIGroups, r.group, "*") && in(rule.APIVersions, r.version, "*") && in(rule.Resources, resource, "*") {
			return true
		}
	}
	return false
}

func in[T comparable](list []T, v, wildcard T) bool {
	return slices.Contains(list, v) || slices.Contains(list, wildcard)
}
