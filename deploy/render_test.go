package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The renderings are made by the pinned tools of hack/tools (helm and
// kustomize, built from the Go module proxy by `go tool` and cached in the
// build cache), the same way an operator's `helm template` and `kubectl
// kustomize` make them.

// obj is one rendered Kubernetes object.
type obj = map[string]any

// install is one way to install itogate: its objects as rendered.
type install struct {
	name string
	objs []obj
	// namespace is itogate's own namespace in this install.
	namespace string
}

var (
	renderMu sync.Mutex
	rendered = map[string]renderResult{}
)

type renderResult struct {
	out []byte
	err error
}

// tool runs a tool of hack/tools (`go -C hack/tools tool NAME ARGS`); its
// output is cached under key for the package's tests ("" for the argument
// list).
func tool(t *testing.T, key string, args ...string) ([]byte, error) {
	t.Helper()
	if key == "" {
		key = strings.Join(args, "\x00")
	}
	renderMu.Lock()
	defer renderMu.Unlock()
	if r, ok := rendered[key]; ok {
		return r.out, r.err
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"-C", filepath.Join(root, "hack", "tools"), "tool"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		err = errors.New(strings.TrimSpace(err.Error() + ": " + stderr.String()))
	}
	rendered[key] = renderResult{stdout.Bytes(), err}
	return stdout.Bytes(), err
}

func abs(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kustomize builds a kustomization directory (relative to deploy/).
func kustomize(t *testing.T, dir string) []obj {
	t.Helper()
	out, err := tool(t, "", "kustomize", "build", abs(t, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return parse(t, "kustomize build "+dir, bytes.NewReader(out))
}

// chart is the Helm chart's directory.
var chart = filepath.Join("helm", "itogate")

// helmTemplate renders the chart as release itogate in namespace ns with
// the given values (YAML); it returns helm's error rather than failing.
func helmTemplate(t *testing.T, ns, values string) ([]obj, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := tool(t, "helm template\x00"+ns+"\x00"+values,
		"helm", "template", "itogate", abs(t, chart), "--namespace", ns, "--values", f)
	if err != nil {
		return nil, err
	}
	return parse(t, "helm template", bytes.NewReader(out)), nil
}

// helm renders the chart and fails the test on an error.
func helm(t *testing.T, ns, values string) []obj {
	t.Helper()
	objs, err := helmTemplate(t, ns, values)
	if err != nil {
		t.Fatalf("helm template (values %q): %v", values, err)
	}
	return objs
}

// parse reads every YAML document of r as a generic object (empty
// documents skipped).
func parse(t *testing.T, name string, r io.Reader) []obj {
	t.Helper()
	dec := yaml.NewDecoder(r)
	var out []obj
	for {
		var d obj
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", name, err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
}
