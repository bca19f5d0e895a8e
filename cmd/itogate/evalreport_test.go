package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// TestEvalReportThroughCLI: the eval authority posts through itogate
// eval-report against a real development server: a passing report of one
// run is PASSED (exit 0, the run live), a failing report of another halts
// it (exit 0, HALTED naming the failed eval), the same report from standard
// input answers the same halt, after which a restart of it is refused
// RUN_HALTED; a report from the environment for a run in another stage is
// refused (exit 2); a report signed by the caller key is unauthenticated
// (exit 6); a run id that is no run's answers 404 (exit 3). The report is
// never an argument.
func TestEvalReportThroughCLI(t *testing.T) {
	l := newCLILife(t)
	post := func(what string, exit int, stdin string, args ...string) api.Envelope[api.EvalReportResult] {
		t.Helper()
		line := append([]string{"eval-report", "--server", l.url, "--manifest", l.mPath, "--json"}, args...)
		res := runCLIStdin(t, stdin, line...)
		var env api.Envelope[api.EvalReportResult]
		if err := json.Unmarshal([]byte(res.stdout), &env); err != nil || res.exit != exit {
			t.Fatalf("%s: exit %d, want %d\nstdout %q\nstderr %q", what, res.exit, exit, res.stdout, res.stderr)
		}
		return env
	}
	report := func(run string, mmlu float64) string {
		t.Helper()
		tok, err := l.r.EvalReport(run, "pretrain", l.digest, "ito-battery-pretrain-2026.10",
			map[string]float64{"mmlu_5shot": mmlu, "hellaswag_acc": 0.42})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	passed := l.create()
	env := post("passing report", 0, "", "--run-id", passed, "--report-file", l.file("pass.jwt", report(passed, 0.31)))
	if env.Data.Verdict != "passed" || env.Data.State != api.RunLive || !env.Data.Created {
		t.Fatalf("passing report: %+v", env)
	}

	halted := l.create()
	failing := report(halted, 0.11)
	env = post("failing report", 0, "", "--run-id", halted, "--report-file", l.file("fail.jwt", failing))
	if env.Data.Verdict != "failed" || env.Data.State != api.RunHalted || strings.Join(env.Data.FailedEvals, ",") != "mmlu_5shot" {
		t.Fatalf("failing report: %+v", env)
	}
	again := post("the same report from standard input", 0, failing+"\n", "--run-id", halted, "--report-file", "-")
	if again.Data.DecisionID != env.Data.DecisionID || again.Data.Created {
		t.Fatalf("the same report again: %+v, first %+v", again, env)
	}
	l.restart(halted, 500, exitDenied, api.CodeRunHalted)
	if st := l.run(halted); st.State != api.RunHalted || st.Halt == nil || st.Halt.DecisionID != env.Data.DecisionID {
		t.Fatalf("runs get after the halt: %+v", st)
	}

	wrongStage, err := l.r.EvalReport(passed, "sft", l.digest, "ito-battery-sft-2026.10", map[string]float64{"mmlu_5shot": 0.5})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ITOGATE_EVAL_REPORT", wrongStage)
	if env := post("a report of another stage", exitDenied, "", "--run-id", passed); env.Error == nil ||
		env.Error.Code != api.CodeEvalReportMismatch {
		t.Fatalf("report of another stage: %+v", env)
	}
	if env := post("a report signed by the caller key", exitUnauthenticated, "", "--run-id", passed,
		"--report-file", l.caller); env.Error == nil || env.Error.Code != api.CodeEvalReportUnauthorized {
		t.Fatalf("caller-signed report: %+v", env)
	}
	if env := post("an unknown run", exitNotFound, "", "--run-id", "run_00000000000000000000000000",
		"--report-file", l.file("unknown.jwt", report("run_00000000000000000000000000", 0.31))); env.Error == nil ||
		env.Error.Code != api.CodeRunStatusNotFound {
		t.Fatalf("unknown run: %+v", env)
	}
	if st := l.run(passed); st.State != api.RunLive || st.Report == nil || st.Report.Stage != "pretrain" {
		t.Fatalf("runs get of the reported run: %+v", st)
	}
}
