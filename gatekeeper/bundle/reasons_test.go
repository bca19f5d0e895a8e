package bundle_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/bundle"
)

// TestReasonsDocumented: bundles/README.md lists exactly bundle.Reasons()
// as the reason label's values, in order (the series created at start-up).
func TestReasonsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../bundles/README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "`reason` is one of")
	if i < 0 {
		t.Fatal("bundles/README.md: no \"`reason` is one of\" list")
	}
	sentence := doc[i:]
	sentence = sentence[:strings.Index(sentence, ".\n")]
	var got []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(sentence, -1)[1:] {
		got = append(got, m[1])
	}
	var want []string
	for _, r := range bundle.Reasons() {
		want = append(want, string(r))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bundles/README.md reasons %v, bundle.Reasons() %v", got, want)
	}
}
