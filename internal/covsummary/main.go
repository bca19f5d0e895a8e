// Command covsummary prints a per-file summary of an `opa test --coverage`
// report and enforces a threshold, so that `make test-policy` keeps the report
// (bin/coverage.json) and a reviewer sees which lines an edit left untested.
//
//	go run ./internal/covsummary -threshold 90 bin/coverage.json
//
// Exit status: 0 when total coverage >= threshold, 1 below it, 2 on a bad report.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// report is the part of OPA's coverage report (cover.Report) read here.
type report struct {
	Files map[string]struct {
		NotCovered      []rowRange `json:"not_covered"`
		CoveredLines    int        `json:"covered_lines"`
		NotCoveredLines int        `json:"not_covered_lines"`
		Coverage        float64    `json:"coverage"`
	} `json:"files"`
	CoveredLines    int     `json:"covered_lines"`
	NotCoveredLines int     `json:"not_covered_lines"`
	Coverage        float64 `json:"coverage"`
}

type rowRange struct {
	Start struct{ Row int } `json:"start"`
	End   struct{ Row int } `json:"end"`
}

func main() {
	threshold := flag.Float64("threshold", 0, "minimum total coverage in percent")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: covsummary [-threshold PERCENT] COVERAGE.json")
		os.Exit(2)
	}
	b, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "covsummary:", err)
		os.Exit(2)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil || r.Files == nil {
		fmt.Fprintf(os.Stderr, "covsummary: %s is not an `opa test --coverage` report: %v\n", flag.Arg(0), err)
		os.Exit(2)
	}
	os.Exit(summarize(os.Stdout, r, *threshold))
}

// summarize writes one line per policy file (coverage, lines, rows not
// covered) and the total over those files, test modules left out (they are
// the tests); it returns the exit status.
func summarize(w io.Writer, r report, threshold float64) int {
	names := make([]string, 0, len(r.Files))
	for name := range r.Files {
		if !strings.HasSuffix(name, "_test.rego") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var covered, total int
	for _, name := range names {
		f := r.Files[name]
		covered += f.CoveredLines
		total += f.CoveredLines + f.NotCoveredLines
		line := fmt.Sprintf("%6.1f%%  %4d/%-4d  %s", f.Coverage, f.CoveredLines, f.CoveredLines+f.NotCoveredLines, name)
		if rows := notCovered(f.NotCovered); rows != "" {
			line += "  not covered: " + rows
		}
		fmt.Fprintln(w, line)
	}
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(covered) / float64(total)
	}
	fmt.Fprintf(w, "%6.1f%%  %4d/%-4d  policy total (threshold %.0f%%; report: every file, tests included)\n", pct, covered, total, threshold)
	if pct < threshold {
		fmt.Fprintf(w, "policy coverage %.1f%% is below the threshold %.0f%%: test the rows listed above\n", pct, threshold)
		return 1
	}
	return 0
}

// notCovered merges OPA's ranges into "744-747,886".
func notCovered(ranges []rowRange) string {
	var out []string
	start, end := -1, -1
	flush := func() {
		switch {
		case start < 0:
		case start == end:
			out = append(out, fmt.Sprint(start))
		default:
			out = append(out, fmt.Sprintf("%d-%d", start, end))
		}
	}
	for _, r := range ranges {
		if start >= 0 && r.Start.Row <= end+1 {
			end = max(end, r.End.Row)
			continue
		}
		flush()
		start, end = r.Start.Row, r.End.Row
	}
	flush()
	return strings.Join(out, ",")
}
