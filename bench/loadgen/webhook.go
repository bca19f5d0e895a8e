package main

// The Kubernetes validating webhook load (`make bench`, step "webhook"):
// Pod AdmissionReviews with a valid ticket over HTTPS on loopback, against
// itogate's webhook listener (-target webhook, POST /validate) and against
// `opa run --server` evaluating the same data.ito.workload.decision through
// bench/webhook-peer/peer.rego (-target opa-webhook,
// POST /v1/data/bench/webhook/review).
//
//	loadgen -write-cert DIR                    # DIR/cert.pem, DIR/key.pem for 127.0.0.1
//	loadgen -webhook-setup STATE -url http://127.0.0.1:API -webhook-url https://127.0.0.1:HOOK -ca-file DIR/cert.pem
//	loadgen -target webhook     -url https://127.0.0.1:HOOK -state STATE -ca-file DIR/cert.pem -mode open -rate 1000 -duration 3s
//	loadgen -target opa-webhook -url https://127.0.0.1:OPA  -state STATE -ca-file DIR/cert.pem -mode open -rate 1000 -duration 3s
//
// -webhook-setup admits one run (train.create of webhookFixture) through
// itogate's API, creates its Job through the webhook (the CREATE that binds
// the ticket to the Job) and writes STATE: the ticket, the Job's uid and,
// for the OPA peer, what itogate reads from its ledger and configuration
// (the run record, the binding, the namespace's account) and the public
// JWKS of GET /v1/tickets/jwks. STATE is a JSON data document
// ({"webhook_peer": ...}) that `opa run` loads beside policies/.
//
// Before the timed phase both targets must allow the Pod review and refuse
// the same review whose ticket has one signature byte changed
// (WORKLOAD_TICKET_INVALID): a target that does not verify is not measured.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

const (
	webhookFixture   = "megatron-llama3-8b-h100-fp8" // 1 node × 8 H100, as test/k8s
	webhookNamespace = "team-a"                      // bench/run.sh binds it to scenario.Account
	webhookJob       = "train-lg"
	podGPUs          = 8 // one node's GPUs, each Pod of a multi-node job
	// webhookTimeout is the shipped ValidatingWebhookConfiguration's
	// timeoutSeconds: an answer later than this is refused by the apiserver,
	// so the load counts it as an error.
	webhookTimeout = 5 * time.Second
)

// peerState is STATE's webhook_peer member.
type peerState struct {
	Ticket     string                    `json:"ticket"`
	JobUID     string                    `json:"job_uid"`
	RunID      string                    `json:"run_id"`
	JWKS       string                    `json:"jwks"`
	Issuer     string                    `json:"issuer"`
	Audience   string                    `json:"audience"`
	Typ        string                    `json:"typ"`
	Annotation string                    `json:"annotation"`
	Namespaces map[string]string         `json:"namespaces"`
	Runs       map[string]map[string]any `json:"runs"`
	Bindings   map[string]map[string]any `json:"bindings"`
}

// writeCert writes a self-signed P-256 certificate for 127.0.0.1 (its own
// CA: the client trusts cert.pem) and its key to dir.
func writeCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "loadgen loopback"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600)
}

// tlsClient trusts only caFile and keeps connections alive, as the
// apiserver does towards a webhook.
func tlsClient(caFile string) (*http.Client, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	return &http.Client{Timeout: webhookTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConns:    2048, MaxIdleConnsPerHost: 2048, IdleConnTimeout: 30 * time.Second, DisableCompression: true,
	}}, nil
}

// webhookSetup admits the run, binds its Job through the webhook and
// writes STATE.
func webhookSetup(statePath, apiURL, hookURL, caFile string) error {
	if err := loopbackURL(apiURL, "http"); err != nil {
		return err
	}
	if err := loopbackURL(hookURL, "https"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := scenario.New(apiURL, fixtures.Manifests())
	if err != nil {
		return err
	}
	m, err := r.LoadManifest(webhookFixture)
	if err != nil {
		return err
	}
	a, _, err := r.Create(ctx, m, r.Key("loadgen-webhook"))
	if err != nil {
		return err
	}
	if a.Status != http.StatusOK || a.Data.Ticket == "" {
		return fmt.Errorf("admit %s: HTTP %d %v", webhookFixture, a.Status, a.Codes())
	}
	jwks, err := get(apiURL + "/v1/tickets/jwks")
	if err != nil {
		return err
	}
	hc, err := tlsClient(caFile)
	if err != nil {
		return err
	}
	jobUID := fmt.Sprintf("00000000-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffffffff)
	body := reviewJSON("batch", "v1", "Job", "jobs", webhookJob, jobUID, map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": webhookJob, "namespace": webhookNamespace, "uid": jobUID,
			"annotations": map[string]any{webhook.TicketAnnotation: a.Data.Ticket}},
		"spec": map[string]any{"parallelism": 1, "completions": 1, "template": podTemplate(a.Data.Ticket)},
	})
	if err := wantReview(hc, hookURL+"/validate", "application/json", body, ""); err != nil {
		return fmt.Errorf("the Job that binds the ticket: %w", err)
	}
	st := peerState{
		Ticket: a.Data.Ticket, JobUID: jobUID, RunID: a.Data.RunID, JWKS: string(jwks),
		Issuer: trust.DevTicketIssuer, Audience: ticket.DefaultAudience, Typ: ticket.Type,
		Annotation: webhook.TicketAnnotation,
		Namespaces: map[string]string{webhookNamespace: scenario.Account},
		// What itogate's ledger answers for this run once its Job is bound.
		Runs: map[string]map[string]any{a.Data.RunID: {"found": true, "account": scenario.Account,
			"booking_id": scenario.Booking, "live": true, "ended_by": ""}},
		Bindings: map[string]map[string]any{a.Data.RunID: {"bound": true,
			"identity": "batch/Job/" + webhookNamespace + "/" + webhookJob, "uids": []string{jobUID}}},
	}
	out, err := json.MarshalIndent(map[string]any{"webhook_peer": st}, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "loadgen: admitted run %s, bound its Job %s through the webhook\n", a.Data.RunID, jobUID)
	return os.WriteFile(statePath, out, 0o600)
}

func get(u string) ([]byte, error) {
	resp, err := http.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	return b, err
}

func podTemplate(tk string) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{webhook.TicketAnnotation: tk}},
		"spec":     podSpec(),
	}
}

func podSpec() map[string]any {
	return map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{
		"name": "trainer", "image": "trainer:1",
		"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": podGPUs}},
	}}}
}

// reviewJSON is the admission.k8s.io/v1 AdmissionReview of a CREATE of
// obj, as the apiserver sends it.
func reviewJSON(group, version, kind, resource, name, uid string, obj map[string]any) []byte {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "req-" + uid, "operation": "CREATE", "dryRun": false,
			"kind":      map[string]any{"group": group, "version": version, "kind": kind},
			"resource":  map[string]any{"group": group, "version": version, "resource": resource},
			"namespace": webhookNamespace, "name": name,
			"userInfo": map[string]any{"username": "system:serviceaccount:kube-system:job-controller"},
			"object":   json.RawMessage(raw),
		},
	})
	if err != nil {
		panic(err)
	}
	return body
}

// podReview is the review of the i-th Pod of the bound Job, with tk.
func podReview(st peerState, tk string, i int) []byte {
	name := fmt.Sprintf("%s-%d", webhookJob, i)
	uid := fmt.Sprintf("00000000-0000-4000-9000-%012d", i)
	yes := true
	return reviewJSON("", "v1", "Pod", "pods", name, uid, map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": webhookNamespace, "uid": uid,
			"labels":      map[string]any{"batch.kubernetes.io/job-name": webhookJob},
			"annotations": map[string]any{webhook.TicketAnnotation: tk},
			"ownerReferences": []any{map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": webhookJob,
				"uid": st.JobUID, "controller": &yes, "blockOwnerDeletion": &yes}}},
		"spec": podSpec(),
	})
}

// forgeTicket changes one byte of the ticket's signature.
func forgeTicket(tk string) string {
	b := []byte(tk)
	i := strings.LastIndexByte(tk, '.') + 3
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// reviewVerdict reads an AdmissionReview response: allowed, and the code
// leading a denial. OPA's data API wraps the document in "result".
func reviewVerdict(body []byte) (allowed bool, code string, err error) {
	var env struct {
		APIVersion string `json:"apiVersion"`
		Response   *struct {
			Allowed bool `json:"allowed"`
			Status  *struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return false, "", fmt.Errorf("not JSON: %.200q", body)
	}
	if env.Response == nil && env.Result != nil {
		return reviewVerdict(env.Result)
	}
	if env.APIVersion != "admission.k8s.io/v1" || env.Response == nil {
		return false, "", fmt.Errorf("not an AdmissionReview response: %.200q", body)
	}
	if env.Response.Status != nil {
		code, _, _ = strings.Cut(env.Response.Status.Message, ":")
	}
	return env.Response.Allowed, code, nil
}

// allowedBody: the body answers the review allowed.
func allowedBody(body []byte) bool {
	ok, _, err := reviewVerdict(body)
	return err == nil && ok
}

// wantReview posts body once and checks the verdict: allowed when
// wantCode is "", else denied with wantCode leading.
func wantReview(hc *http.Client, u, contentType string, body []byte, wantCode string) error {
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	st, out, err := do(hc, req)
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("HTTP %d %.200q", st, out)
	}
	allowed, code, err := reviewVerdict(out)
	switch {
	case err != nil:
		return err
	case wantCode == "" && !allowed:
		return fmt.Errorf("denied %s, want allowed: %.300s", code, out)
	case wantCode != "" && (allowed || code != wantCode):
		return fmt.Errorf("allowed=%v code %q, want denied %s: %.300s", allowed, code, wantCode, out)
	}
	return nil
}

// webhookRequests checks the target on the state's Pod review (allowed)
// and its forged twin (WORKLOAD_TICKET_INVALID), then returns a builder
// over 1 024 distinct Pods of the bound Job.
func webhookRequests(hc *http.Client, o options) (func(int) (*http.Request, error), int, error) {
	raw, err := os.ReadFile(o.state)
	if err != nil {
		return nil, 0, err
	}
	var doc struct {
		Peer peerState `json:"webhook_peer"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.Peer.Ticket == "" {
		return nil, 0, fmt.Errorf("%s: not a -webhook-setup state (%v)", o.state, err)
	}
	st := doc.Peer
	u := o.base + "/validate"
	wrap := func(b []byte) []byte { return b }
	if o.target == "opa-webhook" {
		u = o.base + "/v1/data/bench/webhook/review"
		wrap = func(b []byte) []byte {
			out := make([]byte, 0, len(b)+10)
			return append(append(append(out, `{"input":`...), b...), '}')
		}
	}
	if err := wantReview(hc, u, "application/json", wrap(podReview(st, forgeTicket(st.Ticket), 0)), "WORKLOAD_TICKET_INVALID"); err != nil {
		return nil, 0, fmt.Errorf("%s with a ticket of one changed signature byte: %w", o.target, err)
	}
	if err := wantReview(hc, u, "application/json", wrap(podReview(st, st.Ticket, 0)), ""); err != nil {
		return nil, 0, fmt.Errorf("%s, the Pod of the bound Job: %w", o.target, err)
	}
	fmt.Fprintf(os.Stderr, "loadgen: %s allows the Pod review and refuses its forged twin (WORKLOAD_TICKET_INVALID)\n", o.target)
	const distinct = 1024
	bodies := make([][]byte, distinct)
	for i := range bodies {
		bodies[i] = wrap(podReview(st, st.Ticket, i+1))
	}
	next := func(i int) (*http.Request, error) {
		req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(bodies[(i+distinct)%distinct]))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return req, nil
	}
	return next, http.StatusOK, nil
}
