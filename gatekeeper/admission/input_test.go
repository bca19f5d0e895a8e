package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/policies"
	"github.com/itocompute/itogate/schemas"
)

var updateInputs = flag.Bool("update", false, "rewrite testdata/input/*.json from the policy input the server path builds")

// serverInput is one admission whose policy input the server path builds.
type serverInput struct {
	name string
	// setup prepares the ledger and returns the request, its caller and
	// the values that differ on every run (confirmation refs, run ids),
	// each with the stable name the golden file shows instead.
	setup func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string)
}

// evalToken registers a token of the eval authority with claims.
func (e *env) evalToken(jti string, claims map[string]any) string {
	raw := asVerified(claims)
	raw["iss"], raw["aud"], raw["sub"] = trust.DevEvalsIssuer, trust.DevEvalsAudience, "eval-authority"
	raw["iat"], raw["exp"], raw["jti"] = now.Unix(), now.Add(10*time.Minute).Unix(), jti
	tok := "evals." + jti
	e.evals.tokens[tok] = tokenAnswer{claims: &verify.Claims{
		KeyID: "evals-key-1", JTI: jti, Subject: "eval-authority", Issuer: trust.DevEvalsIssuer,
		Audience: []string{trust.DevEvalsAudience}, IssuedAt: now, Expiry: now.Add(10 * time.Minute), Raw: raw,
	}}
	return tok
}

// onRunNamed is onRun that also names the run and the request's
// confirmation for the golden file.
func onRunNamed(action api.Action, edit func(t *testing.T, e *env, r *admission.Request)) func(*testing.T, *env) (admission.Caller, admission.Request, map[string]string) {
	return func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
		runID := e.admitRun(t)
		req := onRunFor(t, e, action, runID)
		if edit != nil {
			edit(t, e, &req)
		}
		return caller, req, map[string]string{runID: "run_RUN", req.ConfirmationRef: "cfr_REQUEST"}
	}
}

// onRunFor is a request for action on runID (booking.release: on the
// booking) with its own confirmation.
func onRunFor(t *testing.T, e *env, action api.Action, runID string) admission.Request {
	t.Helper()
	bound := runID
	if action == api.BookingRelease {
		runID, bound = "", ""
	}
	ref := e.confirm(t, "cnf-"+string(action), action, bound, "0")
	return e.runReq(action, "key-"+string(action), ref, e.entitlement("ent-"+string(action), nil), runID)
}

func serverInputs() []serverInput {
	create := func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
		req := validCreate(t, e)
		return caller, req, map[string]string{req.ConfirmationRef: "cfr_REQUEST"}
	}
	return []serverInput{
		{"create", create},
		{"create-booking-in-use", func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
			own := e.admitRun(t)
			// Both are admitted at the fake now: the later run id (its
			// millisecond) orders them in the input.
			time.Sleep(2 * time.Millisecond)
			other := e.admitRunAs(t, caller, scenario.Booking) // a booking belongs to one account
			c, req, names := create(t, e)
			names[own], names[other] = "run_OWN", "run_OTHER"
			return c, req, names
		}},
		{"create-booking-released", func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
			run := e.admitRun(t)
			e.mustAdmit(t, caller, onRunFor(t, e, api.BookingRelease, run))
			c, req, names := create(t, e)
			names[run] = "run_RELEASED"
			return c, req, names
		}},
		{"create-ladder-decision", func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
			c, req, names := create(t, e)
			req.EvalReports = []string{e.evalToken("ladder-1", map[string]any{
				"kind": "ladder_decision", "dataset_digest": "sha256:" + strings.Repeat("ab", 32),
				"outcome": "proceed", "iat": now.Add(-time.Hour).Unix(),
			})}
			return c, req, names
		}},
		{"create-key-seen", func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
			run := e.admitRun(t) // under key-run
			c, req, names := create(t, e)
			req.IdempotencyKey = "key-run"
			names[run] = "run_EARLIER"
			return c, req, names
		}},
		{"create-confirmation-consumed", func(t *testing.T, e *env) (admission.Caller, admission.Request, map[string]string) {
			ref := e.confirm(t, "cnf-run", api.TrainCreate, "", costOK)
			run := e.mustAdmit(t, caller, e.createReq("key-run", ref, e.entitlement("ent-run", nil))).Data.RunID
			req := e.createReq("key-2", ref, e.entitlement("ent-2", nil))
			return caller, req, map[string]string{ref: "cfr_CONSUMED", run: "run_EARLIER"}
		}},
		{"stage-advance", onRunNamed(api.TrainStageAdvance, func(_ *testing.T, e *env, r *admission.Request) {
			r.EvalReports = []string{e.evalToken("report-1", map[string]any{
				"kind": "eval_report", "run_id": r.RunID, "stage": "pretrain", "manifest_digest": e.digest,
				"battery_id": "ito-battery-pretrain-2026.10",
				"results":    map[string]any{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42},
			})}
		})},
		{"restart", onRunNamed(api.TrainRestart, func(t *testing.T, e *env, r *admission.Request) {
			r.CheckpointStep = new(int64(500))
			r.ConfirmationRef = e.deposit(t, e.confirmation("cnf-restart-500", api.TrainRestart, r.RunID, "0",
				func(m map[string]any) { m["checkpoint_step"] = int64(500) }))
		})},
		{"restart-cancelled-run", onRunNamed(api.TrainRestart, func(t *testing.T, e *env, r *admission.Request) {
			e.mustAdmit(t, caller, onRunFor(t, e, api.TrainCancel, r.RunID))
			r.CheckpointStep = new(int64(10))
		})},
		{"restart-halted-run", onRunNamed(api.TrainRestart, func(t *testing.T, e *env, r *admission.Request) {
			e.haltRun(t, r.RunID)
			r.CheckpointStep = new(int64(500))
			r.ConfirmationRef = e.deposit(t, e.confirmation("cnf-restart-500", api.TrainRestart, r.RunID, "0",
				func(m map[string]any) { m["checkpoint_step"] = int64(500) }))
		})},
		{"cancel", onRunNamed(api.TrainCancel, nil)},
		{"cleanup-releases-booking", onRunNamed(api.TrainCleanup, func(_ *testing.T, _ *env, r *admission.Request) {
			r.ReleasesBooking = true
		})},
		{"release", onRunNamed(api.BookingRelease, nil)},
	}
}

// buildServerInput runs c's admission through Service.Admit with a policy
// that allows, and returns the input it evaluated, the request and the
// names of c's changing values (the request digest's included).
func buildServerInput(t *testing.T, c serverInput) (map[string]any, admission.Request, map[string]string) {
	t.Helper()
	e := newEnv(t)
	who, req, names := c.setup(t, e)
	d := allow()
	e.decider = d
	e.svc.Admit(context.Background(), who, req)
	in := policyInput(t, e)
	digest := ""
	if len(req.Manifest) > 0 {
		digest = e.digest
	}
	names[admission.RequestDigest(who, req, digest)] = "sha256:REQUEST_DIGEST"
	return in, req, names
}

// TestServerInputGolden: the policy input the server path builds for each
// action (and the ledger facts it can hold) is, as JSON, exactly
// testdata/input/<case>.json once the values that change on every run are
// named. The decision log records this document and `itogate replay`
// evaluates it again, so it must not change unnoticed; -update rewrites
// the files.
func TestServerInputGolden(t *testing.T) {
	for _, c := range serverInputs() {
		t.Run(c.name, func(t *testing.T) {
			in, _, names := buildServerInput(t, c)
			got, err := json.MarshalIndent(in, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			for v, name := range names {
				got = bytes.ReplaceAll(got, []byte(v), []byte(name))
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "input", c.name+".json")
			if *updateInputs {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the policy input differs from %s (go test ./gatekeeper/admission -run TestServerInputGolden -update to accept):\n%s", path, got)
			}
		})
	}
}

// TestInputSchema: every document the builder builds — the server path's
// for every action (serverInputs) and the offline path's for every fixture
// manifest, with and without booking usage — is valid against
// schemas/input.json, whose objects are closed: a field the builder adds
// that the schema does not describe fails here. And every field the schema
// describes outside the manifest and the token claims (which are the
// manifest's and the issuers') is built by at least one of them.
func TestInputSchema(t *testing.T) {
	schema := compileInputSchema(t)
	built := map[string]bool{}
	check := func(name string, in map[string]any) {
		t.Helper()
		doc := jsonValue(t, in)
		if err := schema.Validate(doc); err != nil {
			t.Errorf("%s: not valid against schemas/input.json: %v", name, err)
		}
		fieldPaths(doc, "", built)
	}
	actions := map[api.Action]bool{}
	for _, c := range serverInputs() {
		in, req, _ := buildServerInput(t, c)
		check("server path, "+c.name, in)
		actions[req.Action] = true
	}
	for _, s := range api.Actions() {
		if !actions[s.Action] {
			t.Errorf("no server input case for %s", s.Action)
		}
	}
	names, err := fs.Glob(fixtures.Manifests(), "*.json")
	if err != nil || len(names) == 0 {
		t.Fatalf("fixture manifests: %v %v", names, err)
	}
	for _, name := range names {
		raw, err := fs.ReadFile(fixtures.Manifests(), name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := manifest.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		check("offline, "+name, scenario.OfflineInput(raw, doc, nil, nil, now, embeddedFacts()))
		facts := scenario.OfflineFacts(raw, doc, scenario.ExactEntitlementClaims(doc, now), nil, now)
		facts.Ledger.Booking = &admission.BookingFacts{HeldGPUs: 8, Released: true}
		facts.Facts = embeddedFacts()
		check("offline (itogate eval --held-gpus 8 --released), "+name, facts.Document())
		if name == "llama3-8b.json" {
			// a checkpoint that is no object (a manifest the schema refuses,
			// which the policy still judges): the formulas raise a type
			// error, which the facts carry and the engine fails closed on
			bad := maps.Clone(doc)
			bad["checkpoint"] = "s3://bucket/ckpt"
			errFacts := scenario.OfflineInput(raw, bad, nil, nil, now, embeddedFacts())["facts"].(map[string]any)
			if errFacts["error"] == nil {
				t.Errorf("facts of a manifest whose checkpoint is a string: %v, want an error", errFacts)
			}
			in := scenario.OfflineInput(raw, doc, nil, nil, now, embeddedFacts())
			in["facts"] = errFacts
			check("offline, "+name+" with the facts of a string checkpoint", in)
			// a field the gates compute with, ill-typed (the schema refuses
			// it; the policy still judges it): the field check names it
			zero := maps.Clone(doc)
			model := maps.Clone(doc["model"].(map[string]any))
			model["layers"] = json.Number("0")
			zero["model"] = model
			in = scenario.OfflineInput(raw, zero, nil, nil, now, embeddedFacts())
			got, _ := json.Marshal(in["facts"].(map[string]any)["manifest"])
			if want := `{"invalid_fields":[{"kind":"count","path":["model","layers"]}]}`; string(got) != want {
				t.Errorf("field check of model.layers 0: %s, want %s", got, want)
			}
			in["manifest"] = doc // the facts' shape is what is checked here
			check("offline, "+name+" with the facts of model.layers 0", in)
		}
	}

	// a fix search past its budget (a bundle that allows it one layout)
	tight, err := policy.New(context.Background(), policy.Options{
		Bundle: bundletest.Edited(t, policies.Bundle(), "ito/config/plan/data.json", `"max_candidates": 200000`, `"max_candidates": 1`),
	})
	if err != nil {
		t.Fatal(err)
	}
	rawDeny, err := fs.ReadFile(fixtures.Manifests(), "gpt3-175b-megatron.json")
	if err != nil {
		t.Fatal(err)
	}
	docDeny, err := manifest.Parse(rawDeny)
	if err != nil {
		t.Fatal(err)
	}
	in := scenario.OfflineInput(rawDeny, docDeny, nil, nil, now, tight.Facts())
	if fix, _ := in["facts"].(map[string]any)["parallelism"].(map[string]any)["fix"].(map[string]any); fix["budget_exceeded"] != true {
		t.Errorf("the fix of a search allowed one layout: %v, want budget_exceeded", fix)
	}
	check("offline, the fix search past its budget", in)

	var described []string
	var raw any
	if err := json.Unmarshal(schemas.Input(), &raw); err != nil {
		t.Fatal(err)
	}
	schemaPaths(raw.(map[string]any), "", &described)
	for _, p := range described {
		if !built[p] {
			t.Errorf("schemas/input.json describes %s, which no builder sets", p)
		}
	}
}

// Subtrees the builder copies as they are: the manifest (its own schema,
// checked by manifest.Parse) and the verified tokens' claims.
var verbatim = []string{"/manifest", "/entitlement", "/confirmation", "/eval_reports/*/claims"}

// fieldPaths adds the path of every field in v ("/ledger/booking/live_runs/*/gpus").
func fieldPaths(v any, path string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out[path+"/"+k] = true
			fieldPaths(e, path+"/"+k, out)
		}
	case []any:
		for _, e := range x {
			fieldPaths(e, path+"/*", out)
		}
	}
}

// schemaPaths lists the fields a schema's properties and items describe,
// but for the verbatim subtrees.
func schemaPaths(s map[string]any, path string, out *[]string) {
	if slices.Contains(verbatim, path) {
		return
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for k, sub := range props {
			*out = append(*out, path+"/"+k)
			if m, ok := sub.(map[string]any); ok {
				schemaPaths(m, path+"/"+k, out)
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		schemaPaths(items, path+"/*", out)
	}
	slices.Sort(*out)
}

func compileInputSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.Input()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://itogate.dev/schemas/input.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jsonValue is in as the policy sees it: decoded from its JSON, numbers
// json.Number.
func jsonValue(t *testing.T, in map[string]any) any {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
