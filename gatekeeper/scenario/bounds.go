package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// OtherAccount is the account of the demo's second caller, which never
// holds a booking of its own.
const OtherAccount = "acct_demo_other"

// CreateOn is Create of m on booking (its entitlement, confirmation and
// request all name it) instead of Booking.
func (r *Runner) CreateOn(ctx context.Context, m Manifest, booking, key string) (Answer, error) {
	on := func(c map[string]any) { c["booking_id"] = booking }
	ent, err := r.EntitlementFor(m, on)
	if err != nil {
		return Answer{}, err
	}
	budget, _ := m.Doc["budget"].(map[string]any)
	cost, _ := budget["ceiling_usd"].(string)
	ref, err := r.ConfirmWith(ctx, "train.create", manifest.Digest(m.Raw), cost, "", on)
	if err != nil {
		return Answer{}, err
	}
	return r.Admit(ctx, api.AdmissionRequest{
		Action: "train.create", BookingID: booking, IdempotencyKey: key,
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
	})
}

// AdvanceRequestOn is AdvanceRequest of a run on booking instead of
// Booking.
func (r *Runner) AdvanceRequestOn(ctx context.Context, m Manifest, booking, runID, stage string, reports ...string) (api.AdmissionRequest, error) {
	on := func(c map[string]any) { c["booking_id"] = booking }
	ref, err := r.ConfirmWith(ctx, "train.stage.advance", "", "0.00", runID, on)
	if err != nil {
		return api.AdmissionRequest{}, err
	}
	ent, err := r.EntitlementFor(m, on)
	if err != nil {
		return api.AdmissionRequest{}, err
	}
	return api.AdmissionRequest{
		Action: "train.stage.advance", BookingID: booking, IdempotencyKey: r.Key("advance"),
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
		RunID: runID, Stage: stage, EvalReports: reports,
	}, nil
}

// OtherAccountCreate is a train.create of m by OtherAccount naming the demo
// account's booking (Booking): its own caller token, and an entitlement
// and confirmation for it that name Booking, as a backend confused about
// who holds the booking would sign them.
func (r *Runner) OtherAccountCreate(ctx context.Context, m Manifest) (Answer, error) {
	bearer, err := r.mint(r.keys.Caller, "", map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-other-trainer", "account": OtherAccount,
	}, time.Hour)
	if err != nil {
		return Answer{}, err
	}
	other, err := client.New(client.Options{BaseURL: r.base, Bearer: bearer, Attempts: 1, Timeout: 5 * time.Minute})
	if err != nil {
		return Answer{}, err
	}
	as := func(c map[string]any) { c["sub"] = OtherAccount }
	ent, err := r.EntitlementFor(m, as)
	if err != nil {
		return Answer{}, err
	}
	budget, _ := m.Doc["budget"].(map[string]any)
	cost, _ := budget["ceiling_usd"].(string)
	ref, err := r.ConfirmWith(ctx, "train.create", manifest.Digest(m.Raw), cost, "", as)
	if err != nil {
		return Answer{}, err
	}
	resp, err := other.Admit(ctx, api.AdmissionRequest{
		Action: "train.create", BookingID: Booking, IdempotencyKey: r.Key("other-account"),
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
	})
	if err != nil {
		return Answer{}, err
	}
	return parse(resp)
}

// Cancel admits a train.cancel of runID (on Booking, of a run of m) under
// key, with a fresh entitlement and its own deposited confirmation.
func (r *Runner) Cancel(ctx context.Context, m Manifest, runID, key string) (Answer, error) {
	ref, err := r.Confirm(ctx, "train.cancel", "", "0.00", runID)
	if err != nil {
		return Answer{}, err
	}
	ent, err := r.EntitlementFor(m, nil)
	if err != nil {
		return Answer{}, err
	}
	return r.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: Booking,
		IdempotencyKey: key, EntitlementToken: ent, ConfirmationRef: ref, RunID: runID})
}

// schedulerClient is a client of the development scheduler (SchedulerToken
// its bearer), the caller of the online ticket check.
func (r *Runner) schedulerClient() (*client.Client, error) {
	bearer, err := r.SchedulerToken()
	if err != nil {
		return nil, err
	}
	return client.New(client.Options{BaseURL: r.base, Bearer: bearer, Attempts: 1, Timeout: 5 * time.Minute})
}

// SchedulerToken mints a development scheduler bearer token (the online
// ticket check's caller).
func (r *Runner) SchedulerToken() (string, error) {
	return r.mint(r.keys.Scheduler, "", map[string]any{
		"iss": trust.DevSchedulerIssuer, "aud": trust.DevSchedulerAudience, "sub": "dev-scheduler",
	}, time.Hour)
}

// revoke is a demo row in which the revoker revokes subject of kind (POST
// /v1/revocations) for an hour; it passes on 201.
func (r *Runner) revoke(ctx context.Context, name, kind, subject, reason string) Result {
	res := Result{Name: name, Expected: "201 revoked"}
	tok, err := r.RevokerToken()
	var status int
	var body string
	if err == nil {
		status, body, err = r.Post(ctx, "/v1/revocations", tok, map[string]any{"kind": kind, "subject": subject,
			"expires_at": r.now().Add(time.Hour).Unix(), "reason": reason})
	}
	switch {
	case err != nil:
		res.Got = "error: " + err.Error()
	case status != 201:
		res.Got = fmt.Sprintf("%d %s", status, body)
	default:
		res.Got, res.Pass = res.Expected, true
	}
	return res
}

// BookingRevokedLife drives a run on a booking of its own (a fresh id, so
// the revocation reaches no other demo run) whose booking is revoked after
// admission: the revoker revokes the booking, and then the run's stage
// advance (with a passing report and a fresh entitlement), its ticket
// renewal and the scheduler's online check of its ticket are each refused
// ENTITLEMENT_REVOKED, the code of every revocation of a booking or
// entitlement, and GET /v1/runs/{run_id} says revoked, naming the booking.
func (r *Runner) BookingRevokedLife(ctx context.Context) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }
	m, err := r.Curriculum()
	if err != nil {
		return []Result{{Name: "revoked booking: manifest", Got: err.Error()}}
	}
	booking := randomID("bk_demo_revoked_")[:32]
	created, err := r.CreateOn(ctx, m, booking, r.Key("booking-revoked"))
	add(check("revoked booking: create on a booking of its own", Expect{Status: 200}, created, err))
	runID, ticket := created.Data.RunID, created.Data.Ticket
	if runID == "" {
		return out
	}
	add(r.revoke(ctx, "revoked booking: the revoker revokes the run's booking", "booking", booking,
		"demo: the booking's term was breached"))

	report, err := r.EvalReport(runID, "pretrain", manifest.Digest(m.Raw), "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	var a Answer
	if err == nil {
		var req api.AdmissionRequest
		if req, err = r.AdvanceRequestOn(ctx, m, booking, runID, "long_context", report); err == nil {
			a, err = r.Admit(ctx, req)
		}
	}
	add(check("revoked booking: advance to long_context (evals pass, a fresh entitlement)",
		Expect{Status: 403, Codes: []string{"ENTITLEMENT_REVOKED"}}, a, err))

	resp, err := r.caller.RenewTicket(ctx, runID)
	if err == nil {
		a, err = parse(resp)
	}
	add(check("revoked booking: ticket renewal (POST /v1/runs/{run_id}/ticket)",
		Expect{Status: 403, Codes: []string{"ENTITLEMENT_REVOKED"}}, a, err))

	sched, err := r.schedulerClient()
	if err == nil {
		if resp, err = sched.CheckTicket(ctx, ticket, ""); err == nil {
			a, err = parse(resp)
		}
	}
	add(check("revoked booking: the scheduler's online check of its ticket (POST /v1/tickets/verify)",
		Expect{Status: 403, Codes: []string{"ENTITLEMENT_REVOKED"}}, a, err))

	add(r.runStatus(ctx, "revoked booking: GET /v1/runs/{run_id} says revoked, naming the booking", runID,
		func(st api.RunStatus) string {
			if st.State != api.RunRevoked || st.Revocation == nil || st.Revocation.Kind != "booking" ||
				st.Revocation.Subject != booking || st.Stage != "pretrain" {
				return fmt.Sprintf("state %s in %s, revocation %+v", st.State, st.Stage, st.Revocation)
			}
			return ""
		}))
	return out
}

// The restart budget of a run of the llama3-8b fixture (and of its
// curriculum) under the shipped bundle: min(max_count 64,
// floor(max_lost_fraction 1 × its 21600 s wall clock / lostPerRestart)).
// lostPerRestart is the checkpoint gate's expected work lost per failure:
// half its 10800 s checkpoint interval (500 of its 1000 steps in 6 h) +
// 600 s failure detection + 307 s resume (300 s restart overhead and its
// 120 GiB checkpoint read back). A bundle that prices restarts otherwise
// fails the demo's budget rows, naming its figures.
const (
	restartBudget  = 3
	lostPerRestart = 6307
	wallClock      = 21600
)

// The scheduler job ids of BoundsLife's online checks: its run's ticket
// starts the first, and is refused the second.
const (
	boundJob = "slurm-4711"
	otherJob = "slurm-4712"
)

// BoundsLife drives a run held to its bounds: the scheduler's online check
// of its ticket (POST /v1/tickets/verify) binds it to job boundJob (live)
// and refuses it job otherJob (TICKET_JOB_BOUND, naming the bound job and
// its scheduler: one ticket, one job); a curriculum with no long_context
// settings, so its advance into long_context would train at
// pretrain's 8192-token sequences (denied STAGE_SEQUENCE_NOT_RAISED; the
// run stays in pretrain), then its budget's restarts from step 500, each
// with its own confirmation (admitted), and one more, past the budget
// (denied RESTART_BUDGET_EXCEEDED, naming the figures); GET
// /v1/runs/{run_id} then says live in pretrain with the budget's restarts,
// and a cancel ends it.
func (r *Runner) BoundsLife(ctx context.Context) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }
	m, err := r.CurriculumWith(nil)
	if err != nil {
		return []Result{{Name: "bounds: manifest", Got: err.Error()}}
	}
	created, _, err := r.Create(ctx, m, r.Key("bounds"))
	add(check("bounds: create (a curriculum with no long_context settings)", Expect{Status: 200}, created, err))
	runID, ticket := created.Data.RunID, created.Data.Ticket
	if runID == "" {
		return out
	}
	sched, err := r.schedulerClient()
	add(r.jobCheck(ctx, "bounds: the scheduler's online check binds its ticket to job "+boundJob,
		sched, err, ticket, boundJob))
	var a Answer
	if err == nil {
		var resp client.Response
		if resp, err = sched.CheckTicket(ctx, ticket, otherJob); err == nil {
			a, err = parse(resp)
		}
	}
	add(checkSays("bounds: the same ticket for a second job, "+otherJob,
		Expect{Status: 403, Codes: []string{"TICKET_JOB_BOUND"}},
		"the run's tickets already started job "+boundJob+" of scheduler dev-scheduler; one ticket, one job", a, err))

	report, err := r.EvalReport(runID, "pretrain", manifest.Digest(m.Raw), "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	if err == nil {
		var req api.AdmissionRequest
		if req, err = r.AdvanceRequest(ctx, m, runID, "long_context", report); err == nil {
			a, err = r.Admit(ctx, req)
		}
	}
	add(checkSays("bounds: advance to long_context at pretrain's sequence length (evals pass)",
		Expect{Status: 403, Codes: []string{"STAGE_SEQUENCE_NOT_RAISED"}},
		"stage long_context has sequence length 8192; the stage before it, pretrain, has 8192", a, err))

	for i := 1; i <= restartBudget+1; i++ {
		var req api.AdmissionRequest
		if req, err = r.RestartRequest(ctx, m, runID, 500); err == nil {
			a, err = r.Admit(ctx, req)
		}
		if i <= restartBudget {
			add(check(fmt.Sprintf("bounds: restart %d of its budget of %d, from step 500", i, restartBudget),
				Expect{Status: 200}, a, err))
			continue
		}
		add(checkSays(fmt.Sprintf("bounds: restart %d, past its budget of %d (%d × %d s lost > %d s wall clock)",
			i, restartBudget, i, lostPerRestart, wallClock),
			Expect{Status: 403, Codes: []string{"RESTART_BUDGET_EXCEEDED"}},
			fmt.Sprintf("restart %d of this run is past its budget of %d restarts: %d × %d s expected lost work"+
				" = %d s of its %d s wall clock, above the 100%% it may lose", i, restartBudget, i,
				lostPerRestart, i*lostPerRestart, wallClock), a, err))
	}
	add(r.runStatus(ctx, "bounds: GET /v1/runs/{run_id} says live in pretrain, the denied steps not counted", runID,
		func(st api.RunStatus) string {
			if st.State != api.RunLive || st.Stage != "pretrain" || st.Restarts != restartBudget {
				return fmt.Sprintf("state %s in %s with %d restarts", st.State, st.Stage, st.Restarts)
			}
			return ""
		}))
	// Its GPUs go back to the demo's booking, so that the demo can run
	// again on the same server (--server) within the booking.
	a, err = r.Cancel(ctx, m, runID, r.Key("cancel-bounds"))
	add(check("bounds: cancel", Expect{Status: 200}, a, err))
	return out
}

// FitLife drives a run whose next stage does not fit its GPUs: a
// curriculum whose long_context trains at 131072 tokens without
// activation checkpointing, so its advance into long_context (evals pass)
// is denied MEMORY_ESTIMATE_EXCEEDS_GPU with the parallelism gate's fix;
// GET /v1/runs/{run_id} then says live in pretrain (the deny consumed
// nothing), and a cancel ends it.
func (r *Runner) FitLife(ctx context.Context) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }
	m, err := r.CurriculumWith(map[string]any{"long_context": map[string]any{
		"objective":   map[string]any{"sequence_length": 131072},
		"parallelism": map[string]any{"activation_checkpointing": "none"},
	}})
	if err != nil {
		return []Result{{Name: "fit: manifest", Got: err.Error()}}
	}
	created, _, err := r.Create(ctx, m, r.Key("fit"))
	add(check("fit: create (long_context at 131072 tokens, no activation checkpointing)",
		Expect{Status: 200}, created, err))
	runID := created.Data.RunID
	if runID == "" {
		return out
	}
	report, err := r.EvalReport(runID, "pretrain", manifest.Digest(m.Raw), "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	var a Answer
	if err == nil {
		var req api.AdmissionRequest
		if req, err = r.AdvanceRequest(ctx, m, runID, "long_context", report); err == nil {
			a, err = r.Admit(ctx, req)
		}
	}
	res := check("fit: advance to long_context, whose layout does not fit the GPU's memory (evals pass)",
		Expect{Status: 403, Codes: []string{"MEMORY_ESTIMATE_EXCEEDS_GPU"}}, a, err)
	switch {
	case !res.Pass:
	case len(a.Error.Violations) != 1 || a.Error.Violations[0].Fix == "":
		res.Pass, res.Got = false, res.Got+" without a violation that names a fix"
	default:
		res.Detail = a.Error.Violations[0].Fix
	}
	add(res)
	add(r.runStatus(ctx, "fit: GET /v1/runs/{run_id} says live in pretrain, the denied advance not counted", runID,
		func(st api.RunStatus) string {
			if st.State != api.RunLive || st.Stage != "pretrain" {
				return fmt.Sprintf("state %s in %s", st.State, st.Stage)
			}
			return ""
		}))
	// Its GPUs go back to the demo's booking (see BoundsLife).
	a, err = r.Cancel(ctx, m, runID, r.Key("cancel-fit"))
	add(check("fit: cancel", Expect{Status: 200}, a, err))
	return out
}

// jobCheck is a demo row in which sched (made with err) checks ticket
// online for job (POST /v1/tickets/verify); it passes when the answer is
// 200, live and bound to job.
func (r *Runner) jobCheck(ctx context.Context, name string, sched *client.Client, err error, ticket, job string) Result {
	res := Result{Name: name, Expected: "200 live, job " + job}
	var resp client.Response
	if err == nil {
		resp, err = sched.CheckTicket(ctx, ticket, job)
	}
	var env api.Envelope[api.TicketCheck]
	if err == nil && json.Unmarshal(resp.Body, &env) != nil {
		err = fmt.Errorf("HTTP %d: not an envelope", resp.Status)
	}
	switch d := env.Data; {
	case err != nil:
		res.Got = "error: " + err.Error()
	case resp.Status != 200 || !d.Live || d.JobID != job:
		res.Got = fmt.Sprintf("%d live %t, job %q", resp.Status, d.Live, d.JobID)
		if env.Error != nil {
			res.Got += " " + string(env.Error.Code)
		}
	default:
		res.Got, res.Pass, res.Detail = res.Expected, true, "state "+string(d.State)
	}
	return res
}

// checkSays is check that also wants the answer's one violation (or, when
// it has none, its error) to say exactly says; the message is the row's
// detail.
func checkSays(name string, want Expect, says string, got Answer, err error) Result {
	res := check(name, want, got, err)
	var msg string
	switch {
	case got.Error != nil && len(got.Error.Violations) == 1:
		msg = got.Error.Violations[0].Message
	case got.Error != nil && len(got.Error.Violations) == 0:
		msg = got.Error.Message
	}
	res.Detail = msg
	if res.Pass && msg != says {
		res.Pass, res.Got = false, fmt.Sprintf("%s saying %q", res.Got, msg)
	}
	return res
}
