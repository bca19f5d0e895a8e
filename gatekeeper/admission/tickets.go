package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Tickets that can be withdrawn (docs/tickets.md): a ticket lives minutes
// (Options.TicketLifetime); its holder renews it while the run may run
// (RenewTicket); a scheduler checks it online and binds its run to one job
// (CheckTicket). Both ask the one predicate every enforcement point asks,
// RunRecord.MayWork, and refuse with the run state's code.

// TicketVerifier verifies tickets for the renewal and the online check
// (*ticket.Verifier).
type TicketVerifier interface {
	VerifyAllowExpired(raw []byte, now time.Time) (c ticket.Claims, expired bool, err error)
}

// ticketLifetime is Options.TicketLifetime, or ticket.DefaultLifetime.
func (s *Service) ticketLifetime() time.Duration {
	if s.opts.TicketLifetime > 0 {
		return s.opts.TicketLifetime
	}
	return ticket.DefaultLifetime
}

// RenewTicket answers POST /v1/runs/{run_id}/ticket: a fresh ticket of the
// caller account's run — its first ticket's claims (read back from the
// ledger and verified with the ticket keys) with the topology the run
// holds now (world_size the run record's GPUs, nodes grown with it, when a
// stage advance grew the run: RunTopology), a new jti, iat now and exp at
// most the lifetime later and never after the run's live-until — while the
// run may take work. A cancelled, cleaned-up, released or expired run is
// RUN_NOT_LIVE, a halted one RUN_HALTED, a revoked one ENTITLEMENT_REVOKED;
// another account's run answers like an unknown one. Nothing is written.
func (s *Service) RenewTicket(ctx context.Context, caller Caller, runID string) Outcome {
	if s.opts.Tickets == nil || s.opts.TicketVerifier == nil {
		return fail(api.CodeTicketsDisabled, "tickets are not configured on this itogate")
	}
	r, refused := s.accountRun(ctx, caller, runID, "ticket renewal")
	if refused != nil {
		return *refused
	}
	now := s.opts.Now()
	if err := r.MayWork(now); err != nil {
		o := runStateOutcome(r, now, err)
		s.opts.Logger.Info("ticket renewal refused", "run_id", runID, "account", caller.Account, "code", o.Code)
		return o
	}
	a, err := s.opts.Ledger.Run(ctx, runID)
	if err != nil {
		return s.ledgerFault("ticket renewal", err)
	}
	if a.Ticket == "" {
		return fail(api.CodeTicketsDisabled, "the run was admitted without a ticket; nothing to renew")
	}
	// A ticket's times are whole seconds and its exp is after its iat: in
	// the last part of a second before live-until, the run is live but no
	// ticket fits before it ends.
	if !r.LiveUntil.Truncate(time.Second).After(now.Truncate(time.Second)) {
		return fail(api.CodeRunNotLive, fmt.Sprintf("the run ends within the second (live until %s); no ticket is issued for it",
			r.LiveUntil.UTC().Format(time.RFC3339Nano)))
	}
	c, _, err := s.opts.TicketVerifier.VerifyAllowExpired([]byte(a.Ticket), now)
	if err == nil {
		c, err = RunTopology(c, r.GPUs)
	}
	if err == nil {
		c.ID, c.IssuedAt = NewDecisionID(), now
		c.Expiry = ticket.Capped(r.LiveUntil.Truncate(time.Second), now, s.ticketLifetime())
		var raw string
		if raw, err = s.opts.Tickets.Issue(c); err == nil {
			s.opts.Logger.Info("ticket renewed", "run_id", runID, "account", caller.Account, "jti", c.ID,
				"expires_at", c.Expiry.Unix())
			return Outcome{Status: http.StatusOK, Extra: api.TicketRenewal{RunID: runID, Ticket: raw, JTI: c.ID,
				ExpiresAt: c.Expiry.Unix()}}
		}
	}
	// The stored ticket no longer verifies (its key was rotated out) or
	// the signer failed: no ticket, never one that grants something else.
	s.opts.Logger.Error("ticket not renewed", "run_id", runID, "err", err)
	return fail(api.CodeTicketUnavailable, "the run's ticket could not be renewed; retry, or see the log")
}

// CheckTicket answers POST /v1/tickets/verify for a scheduler: the ticket
// verifies (TICKET_INVALID otherwise; TICKET_EXPIRED past its exp: renew
// it), its run is in the ledger for its account and booking (RUN_NOT_FOUND)
// and may take work now (else the run state's code, as RenewTicket); with
// a job id, the run is bound to that one job (ledger.Jobs: TICKET_JOB_BOUND
// for another). scheduler is the verified scheduler identity; its sub
// names the scheduler in the binding.
func (s *Service) CheckTicket(ctx context.Context, scheduler Caller, req api.TicketCheckRequest) Outcome {
	if s.opts.TicketVerifier == nil {
		return fail(api.CodeTicketsDisabled, "tickets are not configured on this itogate")
	}
	switch {
	case req.Ticket == "" || len(req.Ticket) > verify.DefaultMaxTokenBytes:
		return fail(api.CodeRequestInvalid, fmt.Sprintf("ticket: a compact JWS of 1 to %d bytes", verify.DefaultMaxTokenBytes))
	case req.JobID != "" && !reJobID.MatchString(req.JobID):
		return fail(api.CodeRequestInvalid, "job_id: 1-128 characters of [A-Za-z0-9_.:-], the first a letter or digit")
	case req.JobID != "" && (scheduler.Subject == "" || ledger.IDProblem(scheduler.Subject) != ""):
		return fail(api.CodeSchedulerUnauthenticated, "the scheduler token needs a sub to bind a job")
	}
	now := s.opts.Now()
	c, expired, err := s.opts.TicketVerifier.VerifyAllowExpired([]byte(req.Ticket), now)
	switch {
	case err != nil:
		return fail(api.CodeTicketInvalid, safeTokenMessage("ticket", err))
	case c.Action != string(api.TrainCreate):
		return fail(api.CodeTicketInvalid, "ticket token rejected: not issued for train.create")
	}
	r, err := s.opts.Ledger.RunRecord(ctx, c.RunID)
	switch {
	case errors.Is(err, ledger.ErrNotFound) || (err == nil && (r.Account != c.Account || r.BookingID != c.BookingID)):
		return fail(api.CodeRunNotFound, "the ticket's run is not admitted in this ledger for its account and booking")
	case err != nil:
		return s.ledgerFault("ticket check", err)
	}
	// The run's state first: a withdrawn run says so whatever the ticket's
	// age, so a prolog learns "revoked" rather than "renew".
	if err := r.MayWork(now); err != nil {
		o := runStateOutcome(r, now, err)
		s.opts.Logger.Info("ticket check", "run_id", r.RunID, "jti", c.ID, "job_id", req.JobID, "code", o.Code)
		return o
	}
	if expired {
		return fail(api.CodeTicketExpired, "the ticket expired at "+c.Expiry.UTC().Format(time.RFC3339)+"; renew it")
	}
	out := api.TicketCheck{Live: true, State: api.RunLive, RunID: r.RunID, BookingID: r.BookingID, Account: r.Account,
		JTI: c.ID, ExpiresAt: c.Expiry.Unix(), GPUs: r.GPUs}
	if req.JobID != "" {
		if s.opts.Jobs == nil {
			return fail(api.CodeTicketsDisabled, "this ledger binds no scheduler jobs")
		}
		b, err := s.opts.Jobs.BindJob(context.WithoutCancel(ctx), ledger.JobBind{RunID: r.RunID,
			Scheduler: scheduler.Subject, JobID: req.JobID, At: now})
		var re *ledger.RevocationError
		var he *ledger.RunHaltedError
		var ee *ledger.RunEndedError
		sink, crossed := errors.AsType[*ledger.SinkBoundError](err)
		switch {
		case crossed && sink.Workload != nil:
			s.opts.Logger.Info("ticket check", "run_id", r.RunID, "jti", c.ID, "job_id", req.JobID,
				"code", api.CodeTicketJobBound)
			return fail(api.CodeTicketJobBound, fmt.Sprintf("the run's ticket already created Kubernetes workload %s; "+
				"one ticket, one job: the run is not started twice", sink.Workload.Identity))
		case errors.Is(err, ledger.ErrJobBound):
			s.opts.Logger.Info("ticket check", "run_id", r.RunID, "jti", c.ID, "job_id", req.JobID,
				"code", api.CodeTicketJobBound)
			return fail(api.CodeTicketJobBound, fmt.Sprintf("the run's tickets already started job %s of scheduler %s; one ticket, one job",
				b.JobID, b.Scheduler))
		case errors.As(err, &re), errors.As(err, &he), errors.As(err, &ee), errors.Is(err, ledger.ErrReportOverdue):
			// The run changed state between the read and the bind.
			return runStateOutcome(r, now, err)
		case err != nil:
			return s.ledgerFault("job bind", err)
		}
		out.JobID, out.JobBoundAt = b.JobID, b.BoundAt.Unix()
	}
	s.opts.Logger.Info("ticket check", "run_id", r.RunID, "jti", c.ID, "job_id", req.JobID, "code", "")
	return Outcome{Status: http.StatusOK, Extra: out}
}

// runStateOutcome is the refusal of new work for a run that may not take
// it (RunRecord.MayWork's error err): the revocation's code for a revoked
// run, RUN_HALTED naming the failed evals for a halted one,
// EVAL_REPORT_OVERDUE naming the stage for an overdue one, RUN_NOT_LIVE
// naming the state for an ended one. The message starts with the state.
func runStateOutcome(r ledger.RunRecord, now time.Time, err error) Outcome {
	state := r.State(now)
	if re, ok := errors.AsType[*ledger.RevocationError](err); ok {
		o := revokedOutcome(re.Revocation)
		o.Message = fmt.Sprintf("the run is %s: %s", state, o.Message)
		return o
	}
	if he, ok := errors.AsType[*ledger.RunHaltedError](err); ok {
		return fail(api.CodeRunHalted, haltedMessage(he.Halt))
	}
	if oe, ok := errors.AsType[*ledger.ReportOverdueError](err); ok {
		return fail(api.CodeEvalReportOverdue, overdueMessage(oe))
	}
	how := "past its declared end"
	if r.EndedBy != "" && !now.Before(r.EndedAt) {
		how = "by " + string(r.EndedBy)
	}
	return fail(api.CodeRunNotLive, fmt.Sprintf("the run is %s (ended %s); it takes no new work", state, how))
}
