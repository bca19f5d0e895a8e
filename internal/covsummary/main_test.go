package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	const doc = `{"files": {
	  "p/a.rego": {"covered_lines": 6, "not_covered_lines": 4, "coverage": 60,
	    "not_covered": [{"start":{"row":3},"end":{"row":3}}, {"start":{"row":4},"end":{"row":5}}, {"start":{"row":9},"end":{"row":9}}]},
	  "p/a_test.rego": {"covered_lines": 90, "not_covered_lines": 0, "coverage": 100}},
	  "covered_lines": 96, "not_covered_lines": 4, "coverage": 96}`
	var r report
	if err := json.Unmarshal([]byte(doc), &r); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code := summarize(&out, r, 50); code != 0 {
		t.Fatalf("exit %d at 60%% >= 50%%:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "p/a.rego  not covered: 3-5,9") {
		t.Errorf("rows not merged:\n%s", out.String())
	}
	if strings.Contains(out.String(), "a_test.rego") {
		t.Errorf("test module listed:\n%s", out.String())
	}
	out.Reset()
	// The threshold applies to the policy files (60 %), not OPA's total with tests (96 %).
	if code := summarize(&out, r, 90); code != 1 {
		t.Fatalf("exit %d at 60%% < 90%%:\n%s", code, out.String())
	}
}
