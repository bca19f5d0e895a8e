package webhook

import (
	"bytes"
	"encoding/json"
	"errors"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// review is what Go reads out of a request before policy: the object as
// JSON values, its identity and uid, its controller's uid and its ticket.
type review struct {
	name     string
	object   map[string]any
	identity string // "<group>/<Kind>/<namespace>/<name>"
	uid      string
	ownerUID string // the controller ownerReference's uid; "" for none
	ticket   string
}

// newReview decodes req.Object. Only CREATE and UPDATE carry the object the
// decision is about; anything else is refused (the shipped configuration
// sends nothing else).
func newReview(req *admissionv1.AdmissionRequest) (review, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return review{}, errors.New("only CREATE and UPDATE are reviewed")
	}
	if len(req.Object.Raw) == 0 {
		return review{}, errors.New("the request carries no object")
	}
	dec := json.NewDecoder(bytes.NewReader(req.Object.Raw))
	dec.UseNumber() // exact integers for policy (replicas, GPU counts)
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return review{}, errors.New("the object is not a JSON object")
	}
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &meta); err != nil {
		return review{}, errors.New("the object's metadata does not decode")
	}
	m := meta.Metadata
	rv := review{name: m.Name, object: obj, uid: string(m.UID), ticket: m.Annotations[TicketAnnotation]}
	if rv.name == "" {
		rv.name = req.Name
	}
	if rv.uid == "" {
		// A dry run or an older apiserver may not have assigned one yet;
		// the request's uid stands in (never bound: dry runs bind nothing).
		rv.uid = string(req.UID)
	}
	rv.identity = req.Kind.Group + "/" + req.Kind.Kind + "/" + req.Namespace + "/" + rv.name
	for _, ref := range m.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			rv.ownerUID = string(ref.UID)
		}
	}
	return rv, nil
}
