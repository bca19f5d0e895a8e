//go:build unix

package main

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/internal/patience"
)

// fileInput is one file a command reads: a flag (its name) or its
// positional argument ("ARG").
type fileInput struct {
	command, input string
	dir            bool
}

func (f fileInput) String() string {
	if f.input == "ARG" {
		return f.command + " ARG"
	}
	return f.command + " --" + f.input
}

// fileInputs lists every file-reading input of every command: the flags
// annotated reads-file or reads-dir, and the positional arguments of the
// commands annotated as reading them. serve is left out: its files (the
// configuration, bundles, trust keys, webhook certificates) are read by the
// server's own packages (gatekeeper/config, gatekeeper/runtime), not by
// the command line, and docs/security.md §7 says so.
func fileInputs(t *testing.T) []fileInput {
	var out []fileInput
	walkCommands(t, func(c *cobra.Command) {
		p := commandPath(c)
		if p == "serve" {
			return
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			switch flagValue(f) {
			case valueReadsFile:
				out = append(out, fileInput{p, f.Name, false})
			case valueReadsDir:
				out = append(out, fileInput{p, f.Name, true})
			}
		})
		if readsFileArgs(c) {
			out = append(out, fileInput{p, "ARG", false})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// TestFileFlagsAreAnnotated: a flag whose name says it is a path (…-file,
// …-dir, manifest, signature, key, jwks, pem, bundle, decisions, …) says
// what it is: read (a file, a directory), written, or plain with a reason
// (a boolean flag is no path).
// Without it, the file test below would not know the flag.
func TestFileFlagsAreAnnotated(t *testing.T) {
	pathName := func(n string) bool {
		for _, suffix := range []string{"file", "dir", "manifest", "signature", "key", "jwks", "pem", "bundle",
			"decisions", "config", "entitlement", "confirmation", "path", "output"} {
			if n == suffix || strings.HasSuffix(n, "-"+suffix) {
				return true
			}
		}
		return false
	}
	root := newRootCmd(nil, nil)
	eachFlag(root, func(c *cobra.Command, f *pflag.Flag) {
		if commandPath(c) == "serve" || !pathName(f.Name) || f.Value.Type() == "bool" {
			return
		}
		switch flagValue(f) {
		case valueReadsFile, valueReadsDir, valueWrites:
		case valuePlain:
			if len(f.Annotations[annValue]) < 2 || f.Annotations[annValue][1] == "" {
				t.Errorf("%s --%s: plain without a reason", c.CommandPath(), f.Name)
			}
		default:
			t.Errorf("%s --%s: its name says it is a path, but it is not annotated %s (reads-file, reads-dir, writes or plain)",
				c.CommandPath(), f.Name, annValue)
		}
	})
}

// TestEveryFileInputRefusesHostileFiles: every file and directory any
// command reads — each annotated flag and each file argument — is read
// through the safe reader: a FIFO is refused at once (never opened, so
// nothing waits for a writer), /dev/zero is refused (not read until the
// memory runs out), a symlink to a good file or directory is refused, not
// followed; for directories also a FIFO or a symlink inside. Each refusal
// exits with the command's bad-input code and names the safe reader's
// code. A goroutine and patience.Wait only detect a hang: no timing is
// asserted. Every file input of the tree needs a case here.
func TestEveryFileInputRefusesHostileFiles(t *testing.T) {
	fx := newFileFixture(t)
	cases := fx.commandLines()
	inputs := fileInputs(t)
	var names []string
	for _, in := range inputs {
		names = append(names, in.String())
		if _, ok := cases[in.String()]; !ok {
			t.Errorf("no case for %s: add how to reach its read to fileFixture.commandLines", in)
		}
	}
	for name := range cases {
		if !slices.Contains(names, name) {
			t.Errorf("case %q is no file input of the tree (annotations: %v)", name, names)
		}
	}
	if len(inputs) < 25 {
		t.Fatalf("only %d file inputs: %v", len(inputs), names)
	}

	for _, in := range inputs {
		line, ok := cases[in.String()]
		if !ok {
			continue
		}
		// The control: with the good file the command gets past the read.
		t.Run(in.String()+"/good", func(t *testing.T) {
			res := runBounded(t, line(fx.good(in)))
			if strings.Contains(res.stderr, "MANIFEST_") {
				t.Fatalf("the good file was refused: exit %d, stderr %q", res.exit, res.stderr)
			}
		})
		for _, h := range fx.hostile(t, in) {
			t.Run(in.String()+"/"+h.name, func(t *testing.T) {
				res := runBounded(t, line(h.path))
				want := exitCodeOf(in.command, kindBadInput)
				if res.exit != want || !strings.Contains(res.stderr, string(h.code)) {
					t.Fatalf("exit %d, stderr %q; want exit %d naming %s", res.exit, res.stderr, want, h.code)
				}
			})
		}
	}
}

// runBounded runs the command line, failing (not hanging) if it blocks.
func runBounded(t *testing.T, args []string) cliResult {
	t.Helper()
	done := make(chan cliResult, 1)
	go func() { done <- runCLI(t, args...) }()
	select {
	case res := <-done:
		return res
	case <-time.After(patience.Wait):
		t.Fatalf("itogate %s blocked", strings.Join(args, " "))
		return cliResult{}
	}
}

// fileFixture holds a good file for every file input and the hostile ones.
type fileFixture struct {
	dir     string
	files   map[string]string // kind → a good file of that kind
	bundles string            // a good bundle directory (holds ito/)
	dead    string            // a server URL nothing listens on
	fifo    string
}

type hostileFile struct {
	name, path string
	code       api.Code
}

func newFileFixture(t *testing.T) *fileFixture {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fx := &fileFixture{dir: dir, files: map[string]string{}, dead: "http://" + freeAddr(t)}
	put := func(kind string, data []byte) {
		p := filepath.Join(dir, kind)
		writeMode(t, p, data, 0o600)
		fx.files[kind] = p
	}
	repo := func(p string) []byte { return mustRead(t, filepath.Join("..", "..", p)) }
	put("manifest.json", repo("fixtures/manifests/llama3-8b.json"))
	put("manifest.key.pem", repo("fixtures/keys/dev-manifest-ecdsa.key.pem"))
	put("manifest.pub.pem", repo("fixtures/keys/dev-manifest-ecdsa.pub.pem"))
	put("signer.key.pem", repo("fixtures/keys/dev-caller.key.pem"))
	put("bundle.pub.pem", repo("fixtures/keys/dev-bundle.pub.pem"))
	put("ticket.pub.pem", repo("fixtures/keys/dev-ticket.pub.pem"))
	put("token.jwt", []byte("eyJhbGciOiJFUzI1NiJ9.e30.c2ln\n"))
	put("claims.json", []byte("{}\n"))
	put("decisions.jsonl", nil)
	put("bundle.tar.gz", signedPolicies(t, testNow(), "files", false))
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	put("ticket.jwks.json", ts.Tickets.JWKS())
	put("ticket.jws", []byte(issueTestTicket(t, ts)+"\n"))
	if res := runCLI(t, "sign", "--key", fx.files["manifest.key.pem"], fx.files["manifest.json"]); res.exit != 0 {
		t.Fatalf("sign: %+v", res)
	}
	fx.files["manifest.json.sig"] = fx.files["manifest.json"] + ".sig"
	fx.bundles = copyPolicies(t, filepath.Join(dir, "policies"))
	fx.fifo = filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fx.fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return fx
}

// good is a good file for the input.
func (fx *fileFixture) good(in fileInput) string {
	if in.dir {
		return fx.bundles
	}
	return fx.files[fx.kindOf(in)]
}

// kindOf is the kind of file the input reads.
func (fx *fileFixture) kindOf(in fileInput) string {
	switch {
	case in.input == "manifest" || (in.input == "ARG" && (in.command == "sign" || in.command == "verify")):
		return "manifest.json"
	case in.input == "signature":
		return "manifest.json.sig"
	case in.command == "sign" && in.input == "key":
		return "manifest.key.pem"
	case in.command == "verify" && in.input == "key":
		return "manifest.pub.pem"
	case strings.HasPrefix(in.command, "token ") && in.input == "key":
		return "signer.key.pem"
	case in.input == "verification-key":
		return "bundle.pub.pem"
	case in.input == "ARG" && in.command == "bundle inspect":
		return "bundle.tar.gz"
	case in.input == "jwks":
		return "ticket.jwks.json"
	case in.input == "pem", in.input == "jwks-from":
		return "ticket.pub.pem"
	case in.input == "merge-jwks":
		return "ticket.jwks.json"
	case in.input == "ARG" && in.command == "ticket verify":
		return "ticket.jws"
	case in.input == "entitlement" || in.input == "confirmation":
		return "claims.json"
	case in.input == "decisions":
		return "decisions.jsonl"
	}
	return "token.jwt" // token-file, entitlement-file, depositor-token-file
}

// hostile are the files the input must refuse: a FIFO, /dev/zero, a
// symlink to a good file; for a directory also one holding a FIFO and one
// holding a symlink.
func (fx *fileFixture) hostile(t *testing.T, in fileInput) []hostileFile {
	t.Helper()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(fx.good(in), link); err != nil {
		t.Fatal(err)
	}
	hs := []hostileFile{
		{"FIFO", fx.fifo, api.CodeManifestNotRegular},
		{"dev-zero", "/dev/zero", api.CodeManifestNotRegular},
		{"symlink", link, api.CodeManifestPathSymlink},
	}
	if in.dir {
		withFIFO := copyPolicies(t, filepath.Join(t.TempDir(), "policies"))
		if err := syscall.Mkfifo(filepath.Join(withFIFO, "ito", "data.json"), 0o600); err != nil {
			t.Fatal(err)
		}
		withLink := copyPolicies(t, filepath.Join(t.TempDir(), "policies"))
		if err := os.Symlink("/etc/passwd", filepath.Join(withLink, "ito", "passwd.json")); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, hostileFile{"FIFO-inside", withFIFO, api.CodeManifestNotRegular},
			hostileFile{"symlink-inside", withLink, api.CodeManifestPathSymlink})
	}
	return hs
}

// commandLines is, for each file input, the command line that reaches its
// read with the given path and good files everywhere else; nothing it
// runs reaches a server (a dead address, bounded by --timeout, in case).
func (fx *fileFixture) commandLines() map[string]func(path string) []string {
	f := fx.files
	train := func(in string, extra ...string) func(string) []string {
		return func(p string) []string {
			pick := func(name, kind string) string {
				if name == in {
					return p
				}
				return f[kind]
			}
			args := []string{"train", "--server", fx.dead, "--timeout", "5s", "--booking", "bk_1",
				"--confirmation-ref", "cfr_" + strings.Repeat("0", 32), "--idempotency-key", "k1",
				"--manifest", pick("manifest", "manifest.json"), "--signature", pick("signature", "manifest.json.sig"),
				"--entitlement-file", pick("entitlement-file", "token.jwt"), "--token-file", pick("token-file", "token.jwt")}
			if in == "eval-report" || in == "ladder-decision" {
				args = append(args, "--"+in, f["token.jwt"], "--"+in, p) // the second file is the one tried
			}
			return append(args, extra...)
		}
	}
	ownKey := func(kind string, extra ...string) []string {
		return append([]string{"token", kind, "--kid", "k", "--issuer", "i", "--audience", "a"}, extra...)
	}
	tokenExtra := map[string][]string{
		"caller": nil, "depositor": nil, "revoker": nil,
		"entitlement":     {"--gpu", "H100-SXM-80GB", "--nodes", "1", "--gpus-per-node", "8", "--region", "r", "--fabric", "f"},
		"confirmation":    {"--cost", "1.00"},
		"eval-report":     {"--run-id", "run_1", "--stage", "pretrain", "--manifest", f["manifest.json"]},
		"ladder-decision": {"--dataset-digest", "sha256:" + strings.Repeat("0", 64)},
	}
	cases := map[string]func(string) []string{
		"train --manifest":         train("manifest"),
		"train --signature":        train("signature"),
		"train --entitlement-file": train("entitlement-file"),
		"train --token-file":       train("token-file"),
		"train --eval-report": train("eval-report", "--action", "train.stage.advance", "--run-id", "run_1",
			"--stage", "long_context"),
		"train --ladder-decision": train("ladder-decision"),
		"runs get --token-file": func(p string) []string {
			return []string{"runs", "get", "run_1", "--server", fx.dead, "--timeout", "5s", "--token-file", p}
		},
		"runs list --token-file": func(p string) []string {
			return []string{"runs", "list", "--server", fx.dead, "--timeout", "5s", "--token-file", p}
		},
		"status --token-file": func(p string) []string {
			return []string{"status", "--server", fx.dead, "--timeout", "5s", "--idempotency-key", "k1", "--token-file", p}
		},
		"sign --key": func(p string) []string {
			return []string{"sign", "--key", p, "--output-signature", filepath.Join(fx.dir, "out.sig"), f["manifest.json"]}
		},
		"sign ARG": func(p string) []string {
			return []string{"sign", "--key", f["manifest.key.pem"], "--output-signature", filepath.Join(fx.dir, "out.sig"), p}
		},
		"verify --key": func(p string) []string {
			return []string{"verify", "--key", p, "--signature", f["manifest.json.sig"], f["manifest.json"]}
		},
		"verify --signature": func(p string) []string {
			return []string{"verify", "--key", f["manifest.pub.pem"], "--signature", p, f["manifest.json"]}
		},
		"verify ARG": func(p string) []string {
			return []string{"verify", "--key", f["manifest.pub.pem"], "--signature", f["manifest.json.sig"], p}
		},
		"eval --manifest": func(p string) []string { return []string{"eval", "--manifest", p} },
		"eval --entitlement": func(p string) []string {
			return []string{"eval", "--manifest", f["manifest.json"], "--entitlement", p}
		},
		"eval --confirmation": func(p string) []string {
			return []string{"eval", "--manifest", f["manifest.json"], "--confirmation", p}
		},
		"eval --bundle-dir": func(p string) []string {
			return []string{"eval", "--manifest", f["manifest.json"], "--bundle-dir", p, "--deadline", patience.Deadline.String()}
		},
		"plan --manifest": func(p string) []string { return []string{"plan", "--manifest", p} },
		"plan --entitlement": func(p string) []string {
			return []string{"plan", "--manifest", f["manifest.json"], "--entitlement", p}
		},
		"plan --bundle-dir": func(p string) []string {
			return []string{"plan", "--manifest", f["manifest.json"], "--bundle-dir", p, "--deadline", patience.Deadline.String()}
		},
		"replay --decisions":      func(p string) []string { return []string{"replay", "--decisions", p} },
		"webhook config --bundle": func(p string) []string { return []string{"webhook", "config", "--bundle", p} },
		"webhook policies --bundle": func(p string) []string {
			return []string{"webhook", "policies", "--bundle", p}
		},
		"ledger check --file": func(p string) []string { return []string{"ledger", "check", "--file", p} },
		"keygen --jwks-from": func(p string) []string {
			return []string{"keygen", "--name", "from", "--dir", fx.dir, "--jwks-from", p}
		},
		"keygen --merge-jwks": func(p string) []string {
			return []string{"keygen", "--name", "merged", "--dir", fx.dir, "--key-id", "k2", "--jwks-from", f["manifest.pub.pem"], "--merge-jwks", p}
		},
		"ledger restore --backup": func(p string) []string {
			return []string{"ledger", "restore", "--backup", p, "--to", filepath.Join(fx.dir, "restored.db"),
				"--max-confirmation-lifetime", "1h"}
		},
		"replay --bundle": func(p string) []string {
			return []string{"replay", "--decisions", f["decisions.jsonl"], "--bundle", p}
		},
		"replay --verification-key": func(p string) []string {
			return []string{"replay", "--decisions", f["decisions.jsonl"], "--bundle", f["bundle.tar.gz"], "--verification-key", p, "--key-id", "k"}
		},
		"bundle inspect --verification-key": func(p string) []string {
			return []string{"bundle", "inspect", "--verification-key", p, "--key-id", "k", f["bundle.tar.gz"]}
		},
		"bundle inspect ARG": func(p string) []string { return []string{"bundle", "inspect", p} },
		"ticket verify --jwks": func(p string) []string {
			return []string{"ticket", "verify", "--issuer", trust.DevTicketIssuer, "--jwks", p, f["ticket.jws"]}
		},
		"ticket verify --pem": func(p string) []string {
			return []string{"ticket", "verify", "--issuer", trust.DevTicketIssuer, "--pem", p, "--key-id", keys.TicketKeyID,
				"--algorithm", "EdDSA", f["ticket.jws"]}
		},
		"ticket verify --token-file": func(p string) []string {
			return []string{"ticket", "verify", "--issuer", trust.DevTicketIssuer, "--jwks", f["ticket.jwks.json"],
				"--online", "--server", fx.dead, "--timeout", "5s", "--token-file", p, f["ticket.jws"]}
		},
		"ticket renew --token-file": func(p string) []string {
			return []string{"ticket", "renew", "--server", fx.dead, "--timeout", "5s", "--run-id", "run_1", "--token-file", p}
		},
		"ticket verify ARG": func(p string) []string {
			return []string{"ticket", "verify", "--issuer", trust.DevTicketIssuer, "--jwks", f["ticket.jwks.json"], p}
		},
		"token confirmation --depositor-token-file": func(p string) []string {
			return append(ownKey("confirmation", "--key", f["signer.key.pem"], "--cost", "1.00", "--deposit",
				"--server", fx.dead), "--depositor-token-file", p)
		},
	}
	evalReport := func(manifest, report string) []string {
		return []string{"eval-report", "--server", fx.dead, "--timeout", "5s", "--run-id",
			"run_00000000000000000000000000", "--manifest", manifest, "--report-file", report}
	}
	cases["eval-report --manifest"] = func(p string) []string { return evalReport(p, f["token.jwt"]) }
	cases["eval-report --report-file"] = func(p string) []string { return evalReport(f["manifest.json"], p) }
	for _, args := range revokeArgs("FILE") {
		cases[strings.Join(args[:2], " ")+" "+args[2]] = func(p string) []string {
			line := append(slices.Clone(args), "--server", fx.dead, "--timeout", "5s")
			return slices.Replace(line, slices.Index(line, "FILE"), slices.Index(line, "FILE")+1, p)
		}
	}
	for kind, extra := range tokenExtra {
		cases["token "+kind+" --key"] = func(p string) []string {
			return append(ownKey(kind, "--key", p), extra...)
		}
	}
	for _, kind := range []string{"entitlement", "confirmation", "eval-report"} {
		cases["token "+kind+" --manifest"] = func(p string) []string {
			args := []string{"token", kind, "--manifest", p}
			if kind == "eval-report" {
				args = append(args, "--run-id", "run_1", "--stage", "pretrain")
			}
			return args
		}
	}
	return cases
}
