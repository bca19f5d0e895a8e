package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strings"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/manifest"
)

// Run drives every case in order and returns one Result per case. cases is
// the content of fixtures/cases/policy-cases.json (fixture manifests with
// their expected decisions), driven through HTTP after the fixed flow cases.
func (r *Runner) Run(ctx context.Context, cases []FixtureCase) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }

	// 1. A known-good run is admitted.
	m8b, err := r.LoadManifest("llama3-8b")
	if err != nil {
		return []Result{{Name: "load llama3-8b", Got: err.Error()}}
	}
	key := r.Key("llama3-8b")
	first, req, err := r.Create(ctx, m8b, key)
	add(check("llama3-8b: allow", Expect{Status: 200}, first, err))

	// 2. The same request again: the stored allow, nothing new consumed.
	again, err := r.Admit(ctx, req)
	res := check("same request again → same allow (replay)", Expect{Status: 200}, again, err)
	if res.Pass && (again.Data.RunID != first.Data.RunID || again.Data.DecisionID != first.Data.DecisionID ||
		!strings.Contains(again.Notice, "replay")) {
		res.Pass, res.Got = false, res.Got+" but another run_id/decision_id or no replay notice"
	}
	res.Detail = "run_id " + again.Data.RunID
	add(res)

	// 3. The same confirmation under a new key: replayed.
	replay := req
	replay.IdempotencyKey = r.Key("llama3-8b-replay")
	a, err := r.Admit(ctx, replay)
	add(check("same confirmation, new key", Expect{Status: 403, Codes: []string{"CONFIRMATION_REPLAYED"}}, a, err))

	// 4. The status of the first key answers the stored allow.
	st, err := r.Status(ctx, key)
	res = check("status by idempotency key", Expect{Status: 200}, st, err)
	if res.Pass && st.Data.RunID != first.Data.RunID {
		res.Pass, res.Got = false, "another run_id"
	}
	add(res)

	// 5. One byte of the manifest changed after signing.
	tampered := m8b
	tampered.Raw = append([]byte(nil), m8b.Raw...)
	tampered.Raw[strings.Index(string(tampered.Raw), "\"ceiling_usd\": \"")+len("\"ceiling_usd\": \"")]++
	a, _, err = r.Create(ctx, tampered, r.Key("tampered"))
	add(check("manifest with one byte changed", Expect{Status: 403, Codes: []string{"MANIFEST_SIGNATURE_INVALID"}}, a, err))

	// 6. The key of step 1 with another request: conflict.
	other, err := r.LoadManifest("llama3-70b")
	if err == nil {
		a, _, err = r.Create(ctx, other, key)
	}
	add(check("idempotency key reused for another manifest", Expect{Status: 409, Codes: []string{"IDEMPOTENCY_KEY_CONFLICT"}}, a, err))

	// 7. A stale entitlement (issued 10 minutes ago, max age 5 minutes).
	ent, err := r.EntitlementFor(m8b, func(c map[string]any) { c["iat"] = r.now().Unix() - 600 })
	if err == nil {
		var ref string
		ref, err = r.Confirm(ctx, "train.create", manifest.Digest(m8b.Raw), "2000.00", "")
		stale := req
		stale.IdempotencyKey, stale.EntitlementToken, stale.ConfirmationRef = r.Key("stale"), ent, ref
		if err == nil {
			a, err = r.Admit(ctx, stale)
		}
	}
	add(check("stale entitlement", Expect{Status: 403, Codes: []string{"ENTITLEMENT_STALE"}}, a, err))

	// 8. Cancel the admitted run with its own confirmation.
	ref, err := r.Confirm(ctx, "train.cancel", "", "0.00", first.Data.RunID)
	if err == nil {
		ent, err = r.EntitlementFor(m8b, nil)
	}
	if err == nil {
		a, err = r.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: Booking,
			IdempotencyKey: r.Key("cancel"), EntitlementToken: ent, ConfirmationRef: ref, RunID: first.Data.RunID})
	}
	add(check("cancel the admitted run", Expect{Status: 200}, a, err))

	// 9. No caller token.
	anon, _ := client.New(client.Options{BaseURL: r.base, Attempts: 1})
	resp, err := anon.Status(ctx, key)
	if err == nil {
		a, err = parse(resp)
	}
	add(check("no caller token", Expect{Status: http.StatusUnauthorized, Codes: []string{"CALLER_UNAUTHENTICATED"}}, a, err))

	// 10. Runs' lives, each a list of rows:
	//   a. create, stage advances (evals pass; an eval fails, no override),
	//      restart from a checkpoint, cancel, restart refused;
	//   b. a run whose entitlement is revoked after admission: its restart
	//      is denied with the revocation's code, its status says revoked,
	//      its cancel is admitted;
	//   c. a run the eval authority halts by posting a failing report
	//      directly, its holder never asking to advance;
	//   d. a run whose booking is revoked after admission: its advance, its
	//      ticket renewal and the scheduler's check of its ticket are
	//      refused with the revocation's code;
	//   e. a run held to its bounds: its ticket bound to one scheduler job
	//      and refused a second, a long-context stage that does not raise
	//      the sequence length, restarts up to its budget and one past it;
	//   f. a run whose next stage does not fit its GPUs' memory: the advance
	//      is denied with the fix, and the run stays in its stage.
	for _, life := range []func(context.Context) []Result{
		r.RunLife, r.RevokedLife, r.DirectHaltLife, r.BookingRevokedLife, r.BoundsLife, r.FitLife,
	} {
		for _, res := range life(ctx) {
			add(res)
		}
	}

	// 11. Every fixture manifest with its expected decision.
	for _, fc := range cases {
		m, err := r.LoadManifest(strings.TrimSuffix(fc.Manifest, ".json"))
		if err != nil {
			add(Result{Name: fc.Manifest, Got: err.Error()})
			continue
		}
		want := Expect{Status: 200}
		if !fc.Allow {
			want = Expect{Status: 403, Codes: sorted(fc.Codes)}
		}
		a, _, err := r.Create(ctx, m, r.Key(m.Name))
		add(check("fixture "+m.Name, want, a, err))
	}
	return out
}

// LoadCases reads fixtures/cases/policy-cases.json from fsys.
func LoadCases(fsys fs.FS, name string) ([]FixtureCase, error) {
	raw, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Cases []FixtureCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return doc.Cases, nil
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
