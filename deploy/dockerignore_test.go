package deploy

import (
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ignoreRule is one line of .dockerignore, read as Docker reads it
// (moby/patternmatcher): the path cleaned, a leading "/" dropped, "!"
// re-including; "*" and "?" stay within a path element, "**" spans any
// number of them.
type ignoreRule struct {
	re      *regexp.Regexp
	dirs    int // path elements of the pattern
	include bool
}

func readDockerignore(t *testing.T) []ignoreRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []ignoreRule
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if strings.HasPrefix(line, "!") {
			r.include, line = true, strings.TrimSpace(line[1:])
		}
		line = strings.TrimPrefix(path.Clean(line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		r.re, r.dirs = regexp.MustCompile(re.String()), strings.Count(line, "/")+1
		rules = append(rules, r)
	}
	return rules
}

// inContext reports whether Docker sends the file (a slash path relative
// to the repository) in the build context: the last rule that matches it,
// or the parent directory of its first elements, decides.
func inContext(rules []ignoreRule, file string) bool {
	in := true
	elems := strings.Split(file, "/")
	for _, r := range rules {
		match := r.re.MatchString(file)
		if !match && r.dirs < len(elems) {
			match = r.re.MatchString(strings.Join(elems[:r.dirs], "/"))
		}
		if match {
			in = r.include
		}
	}
	return in
}

// TestDockerignoreKeepsSecretsOut: the build context holds what the binary
// is built from — and no private key, key file, walkthrough output, ledger,
// log or credential, wherever it lies; only the published development keys
// the binary embeds.
func TestDockerignoreKeepsSecretsOut(t *testing.T) {
	rules := readDockerignore(t)
	for _, f := range []string{"go.mod", "go.sum", "cmd/itogate/main.go", "gatekeeper/runtime/run.go", "internal/patience/patience.go",
		"policies/policies.go", "policies/ito/tables/workloads/data.json", "schemas/input.json", "fixtures/fixtures.go",
		"fixtures/keys/keys.go", "fixtures/keys/dev-ticket.key.pem", "fixtures/keys/dev-ticket.pub.pem"} {
		if !inContext(rules, f) {
			t.Errorf("%s is left out of the build context: the binary needs it", f)
		}
	}
	// The README's walkthrough (examples/production) and keygen's defaults
	// write these; a developer may drop a key anywhere.
	for _, f := range []string{".git/config", "examples/production/keys/caller.key.pem", "examples/production/keys/bundle.pub.pem",
		"examples/production/bundle.tar.gz", "examples/production/data/decisions.jsonl", "data/ledger.db", "bin/itogate",
		"keys/ticket.key.pem", "ticket.key.pem", "release.key.pem", "gatekeeper/runtime/tls.key", "cmd/itogate/ca-key.pem",
		"fixtures/keys/prod-ticket.key.pem", "fixtures/keys/../../secret.key", ".env", "gatekeeper/.env", "kubeconfig",
		"internal/kubeconfig", "policies/bundle.p12", "deploy/kubernetes/base/configmap.yaml", "hack/tools/go.mod",
		"bench/out/2026-11-30/summary.md", "examples/production/itogate.yaml"} {
		if inContext(rules, path.Clean(f)) {
			t.Errorf("%s is in the build context", f)
		}
	}
	// And every file in this checkout that is, or is named like, a private
	// key (the walkthrough's output included, when it was run here).
	keyName := regexp.MustCompile(`(\.key|\.key\.pem|-key\.pem|\.p12|\.pfx)$`)
	pemKey := regexp.MustCompile(`-----BEGIN ([A-Z0-9]+ )?PRIVATE KEY-----`)
	root := ".."
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(rel, "fixtures/keys/dev-") || !inContext(rules, rel) {
			return nil
		}
		if keyName.MatchString(rel) {
			t.Errorf("%s: a key file in the build context", rel)
			return nil
		}
		switch path.Ext(rel) {
		case ".go", ".rego", ".md": // sources and docs quote PEM headers as test input
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		head, _ := io.ReadAll(io.LimitReader(f, 64<<10))
		if pemKey.Match(head) {
			t.Errorf("%s: a private key in the build context", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
