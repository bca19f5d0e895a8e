package webhook

import (
	"bytes"
	"encoding/json"
	"errors"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// review is what Go reads out of a request before policy: the object as
// JSON values, its identity and uid, its controller's uid and its ticket.
type review struct {
	name   string
	object map[string]any
	// identity is "<group>/<Kind>/<namespace>/<name>", or for an object
	// created with metadata.generateName (not a Pod: a bare Pod is its own
	// workload and has no children to choose between two of them)
	// "<group>/<Kind>/<namespace>/<generateName>*" (ledger.Step).
	identity string
	uid      string
	ownerUID string // the controller ownerReference's uid; "" for none
	ticket   string
	// oldObject is the stored object of an UPDATE of the scale
	// subresource (its replicas before the change); nil otherwise.
	oldObject map[string]any
	// ticketChanged: an UPDATE whose stored object carried a ticket and
	// whose new object carries another one.
	ticketChanged bool
	// teardown: an UPDATE of the object itself that changes nothing that
	// runs (onlyStops: the spec is the stored one's but for suspend members
	// set to true; the same ticket annotation and controller): a finalizer,
	// label or annotation change, or a suspend. A Pod's that adds or
	// changes a device annotation is none (review drops it, podAnnotationsSet).
	teardown bool
	// podAnnotationsSet: of a Pod UPDATE, the annotation keys the new
	// object has that the stored one lacks or has with another value. The
	// kubelet and NRI plugins read a Pod's annotations again when its
	// sandbox is re-created, so one that injects devices changes what runs.
	podAnnotationsSet []string
}

// subresourceScale is the scale subresource (<kind>/scale), whose review
// carries an autoscaling/v1 Scale instead of the object.
const subresourceScale = "scale"

// newReview decodes req.Object (and, for an UPDATE, req.OldObject). Only
// CREATE and UPDATE carry the object the decision is about; anything else is
// refused (the shipped configuration sends nothing else).
func newReview(req *admissionv1.AdmissionRequest) (review, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return review{}, errors.New("only CREATE and UPDATE are reviewed")
	}
	if len(req.Object.Raw) == 0 {
		return review{}, errors.New("the request carries no object")
	}
	obj, err := decodeObject(req.Object.Raw)
	if err != nil {
		return review{}, errors.New("the object is not a JSON object")
	}
	m, ok := objectMeta(obj)
	if !ok {
		return review{}, errors.New("the object's metadata does not decode")
	}
	// The policy never reads managedFields (the apiserver's field
	// ownership, often the largest part of an object).
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	rv := review{name: m.name, object: obj, uid: m.uid, ticket: m.ticket, ownerUID: m.ownerUID}
	if req.Operation == admissionv1.Update {
		if len(req.OldObject.Raw) == 0 {
			return review{}, errors.New("the UPDATE carries no old object")
		}
		old, err := decodeObject(req.OldObject.Raw)
		if err != nil {
			return review{}, errors.New("the old object is not a JSON object")
		}
		om, ok := objectMeta(old)
		if !ok {
			return review{}, errors.New("the old object's metadata does not decode")
		}
		rv.ticketChanged = om.ticket != "" && rv.ticket != "" && om.ticket != rv.ticket
		if req.SubResource == subresourceScale {
			rv.oldObject = old
		}
		rv.teardown = req.SubResource == "" && om.ticket == m.ticket && om.ownerUID == m.ownerUID &&
			onlyStops(old["spec"], obj["spec"])
		if req.SubResource == "" && req.Resource.Group == "" && req.Resource.Resource == "pods" {
			rv.podAnnotationsSet = annotationsSet(old, obj)
		}
	}
	if rv.name == "" {
		rv.name = req.Name
	}
	if rv.uid == "" {
		// A dry run or an older apiserver may not have assigned one yet;
		// the request's uid stands in (never bound: dry runs bind nothing).
		rv.uid = string(req.UID)
	}
	rv.identity = req.Kind.Group + "/" + req.Kind.Kind + "/" + req.Namespace + "/" + rv.name
	if m.generateName != "" && req.Kind.Group != "" {
		// The apiserver generates the name before validating admission, and
		// a client retrying a create whose answer it lost gets another one:
		// the prefix is what a retry has in common.
		rv.identity = req.Kind.Group + "/" + req.Kind.Kind + "/" + req.Namespace + "/" + m.generateName + ledger.GeneratedIdentitySuffix
	}
	return rv, nil
}

// annotationsSet is the metadata.annotations keys of next that prev lacks
// or has with another value (removed ones are not: they only take away).
func annotationsSet(prev, next map[string]any) []string {
	annotations := func(o map[string]any) map[string]any {
		md, _ := o["metadata"].(map[string]any)
		a, _ := md["annotations"].(map[string]any)
		return a
	}
	p := annotations(prev)
	var set []string
	for k, v := range annotations(next) {
		if pv, ok := p[k]; !ok || pv != v {
			set = append(set, k)
		}
	}
	return set
}

// onlyStops: next is prev but for members named "suspend" that are true in
// next (a suspended Job, JobSet, RayJob or a Kubeflow job's
// runPolicy.suspend), also inside objects prev lacks: nothing starts that
// did not run before. Values compare as decoded (numbers by their text).
func onlyStops(prev, next any) bool {
	switch n := next.(type) {
	case map[string]any:
		p, ok := prev.(map[string]any)
		if !ok {
			return false
		}
		for k, nv := range n {
			if k == "suspend" && nv == true {
				continue
			}
			pv, present := p[k]
			if !present {
				// A member the stored spec lacks may only add stops
				// (runPolicy: {suspend: true} where no runPolicy was).
				if !onlyStops(map[string]any{}, nv) {
					return false
				}
				continue
			}
			if !onlyStops(pv, nv) {
				return false
			}
		}
		for k := range p {
			if _, ok := n[k]; !ok {
				return false
			}
		}
		return true
	case []any:
		p, ok := prev.([]any)
		if !ok || len(p) != len(n) {
			return false
		}
		for i := range n {
			if !onlyStops(p[i], n[i]) {
				return false
			}
		}
		return true
	case nil, string, bool, json.Number:
		return prev == next
	}
	return false
}

// decodeObject decodes one JSON object, numbers kept exact for policy
// (replicas, GPU counts).
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("null")
	}
	return obj, nil
}

// meta is what Go reads of an object's metadata.
type meta struct{ name, generateName, uid, ticket, ownerUID string }

// objectMeta reads metadata.name, .generateName, .uid, .annotations[TicketAnnotation] and
// the uid of the last ownerReference with controller: true from the object
// as decoded (the map policy sees), by exact member names: Go and the
// policy read the same members (decoding into metav1.ObjectMeta would also
// match "Annotations" or "UID", case-insensitively, and decode the object a
// second time). Absent or null members are empty; a member of the wrong
// type (annotations whose values are not all strings, among them) is not
// ok, as metav1.ObjectMeta would refuse it.
func objectMeta(obj map[string]any) (meta, bool) {
	var m meta
	md, ok := optional[map[string]any](obj, "metadata")
	if !ok {
		return m, false
	}
	if m.name, ok = optional[string](md, "name"); !ok {
		return m, false
	}
	if m.uid, ok = optional[string](md, "uid"); !ok {
		return m, false
	}
	if m.generateName, ok = optional[string](md, "generateName"); !ok {
		return m, false
	}
	ann, ok := optional[map[string]any](md, "annotations")
	if !ok {
		return m, false
	}
	for k, v := range ann {
		s, isString := v.(string)
		if !isString {
			return m, false
		}
		if k == TicketAnnotation {
			m.ticket = s
		}
	}
	refs, ok := optional[[]any](md, "ownerReferences")
	if !ok {
		return m, false
	}
	for _, r := range refs {
		ref, isObject := r.(map[string]any)
		if !isObject {
			return m, false
		}
		controller, ok := optional[bool](ref, "controller")
		if !ok {
			return m, false
		}
		uid, ok := optional[string](ref, "uid")
		if !ok {
			return m, false
		}
		if controller {
			m.ownerUID = uid
		}
	}
	return m, true
}

// optional is m[k] as a T: the zero T when absent or null, not ok when of
// another type.
func optional[T any](m map[string]any, k string) (T, bool) {
	var zero T
	v, present := m[k]
	if !present || v == nil {
		return zero, true
	}
	t, ok := v.(T)
	return t, ok
}
