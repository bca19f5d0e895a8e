package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestNoSecretInArguments: no flag of any command takes a secret as its
// value (the rule of secretName: a token, secret, password, credential,
// key … comes from a file, standard input or the environment).
func TestNoSecretInArguments(t *testing.T) {
	root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	if p := secretFlagProblems(root); len(p) != 0 {
		t.Fatalf("secret-valued flags:\n%s", strings.Join(p, "\n"))
	}
	// The rule is not vacuous on the real tree: the file flags of secrets
	// match it and pass as files, the plain ones by their reason.
	var matched []string
	eachFlag(root, func(c *cobra.Command, f *pflag.Flag) {
		if secretName.MatchString(f.Name) {
			matched = append(matched, commandPath(c)+" --"+f.Name)
		}
	})
	for _, want := range []string{"train --token-file", "train --entitlement-file", "status --token-file",
		"token confirmation --depositor-token-file", "token caller --key", "sign --key", "verify --key",
		"bundle inspect --verification-key", "eval --entitlement", "eval --confirmation", "train --idempotency-key",
		"runs get --token-file", "runs list --page-token", "revoke booking --revoker-token-file",
		"revoke confirmation --depositor-token-file"} {
		if !slices.Contains(matched, want) {
			t.Errorf("the rule does not see %q (matched: %v)", want, matched)
		}
	}
}

// TestSecretRuleCatchesPlantedFlags: the walker finds exactly the planted
// secret-valued flags, in subcommands too, and passes file flags, plain
// flags with a reason and flags whose names say nothing of secrets.
func TestSecretRuleCatchesPlantedFlags(t *testing.T) {
	root := &cobra.Command{Use: "x"}
	sub := &cobra.Command{Use: "sub", Run: func(*cobra.Command, []string) {}}
	root.AddCommand(sub)
	f := sub.Flags()
	for _, bad := range []string{"token", "api-token", "password", "db-passwd", "client-secret", "key", "signing-key",
		"private-key", "bearer", "jwt", "credentials", "entitlement", "depositor-token"} {
		f.String(bad, "", "")
	}
	f.String("token-file", "", "")
	readsFile(f, "token-file")
	f.String("idempotency-key", "", "")
	plainValue(f, "idempotency-key", "names a request")
	f.String("session-key", "", "")
	plainValue(f, "session-key", "") // plain without a reason: not enough
	f.String("tokenizer", "", "")    // no secret word: fine
	f.String("key-id", "", "")
	f.String("monkey", "", "")
	root.PersistentFlags().String("auth-token", "", "")

	var got []string
	flagOf := regexp.MustCompile(`^x (?:sub )?(--[a-z-]+):`)
	for _, p := range secretFlagProblems(root) {
		m := flagOf.FindStringSubmatch(p)
		if m == nil {
			t.Fatalf("problem %q names no flag of x", p)
		}
		got = append(got, m[1]+":")
	}
	sort.Strings(got)
	want := []string{"--api-token:", "--auth-token:", "--bearer:", "--client-secret:", "--credentials:", "--db-passwd:",
		"--depositor-token:", "--entitlement:", "--jwt:", "--key:", "--password:", "--private-key:", "--session-key:",
		"--signing-key:", "--token:"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems for\n%v\nwant\n%v", got, want)
	}
}

// TestNoEnvironmentInHelp: with every environment variable the CLI reads
// set, no flag's default or help of any command shows its value (the
// depositor token's did), nor does any command's --help output; a planted
// flag whose default comes from the environment is caught.
func TestNoEnvironmentInHelp(t *testing.T) {
	names := envNamesInSource(t)
	if !slices.Contains(names, "ITOGATE_DEPOSITOR_TOKEN") || !slices.Contains(names, "ITOGATE_URL") {
		t.Fatalf("environment variables found in the source: %v", names)
	}
	var values []string
	for _, n := range names {
		v := "https://user:sentinel-" + strings.ToLower(n) + "@example.invalid"
		t.Setenv(n, v)
		values = append(values, "sentinel-"+strings.ToLower(n))
	}
	root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	if p := envDefaultProblems(root, values); len(p) != 0 {
		t.Fatalf("%s", strings.Join(p, "\n"))
	}
	walkCommands(t, func(c *cobra.Command) {
		res := runCLI(t, append(strings.Fields(commandPath(c)), "--help")...)
		for _, v := range values {
			if strings.Contains(res.stdout+res.stderr, v) {
				t.Errorf("itogate %s --help shows $%s's value", commandPath(c), v)
			}
		}
	})

	planted := &cobra.Command{Use: "x"}
	planted.Flags().String("server", os.Getenv("ITOGATE_URL"), "")
	if p := envDefaultProblems(planted, values); len(p) != 1 {
		t.Fatalf("planted default from the environment: %v", p)
	}
}

// envNamesInSource lists the ITOGATE_* variables cmd/itogate's code names.
func envNamesInSource(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"(ITOGATE_[A-Z_]+)"`)
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range re.FindAllStringSubmatch(string(mustRead(t, f)), -1) {
			seen[m[1]] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestDepositorTokenNeverAnArgument: the depositor's bearer token comes
// from --depositor-token-file, standard input (-) or the environment, and
// reaches the server as the bearer; --depositor-token is no flag.
func TestDepositorTokenNeverAnArgument(t *testing.T) {
	_, pems := ownKeyTrust(t)
	var bearers []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bearers = append(bearers, r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true,"data":{"confirmation_ref":"cfr_test"}}`))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "depositor.jwt")
	writeMode(t, file, []byte("from.the.file\n"), 0o600)
	base := []string{"token", "confirmation", "--key", pems["confirmation"] + ".key.pem", "--kid", "c", "--issuer", "i",
		"--audience", "a", "--cost", "1.00", "--deposit", "--server", srv.URL}

	t.Setenv("ITOGATE_DEPOSITOR_TOKEN", "from.the.env")
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"file", []string{"--depositor-token-file", file}, "", "Bearer from.the.file"},
		{"standard input", []string{"--depositor-token-file", "-"}, "from.stdin\n", "Bearer from.stdin"},
		{"environment", nil, "", "Bearer from.the.env"},
	} {
		bearers = nil
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetIn(strings.NewReader(tc.stdin))
		root.SetArgs(append(base, tc.args...))
		c, err := root.ExecuteC()
		if code, msg := exitStatus(c, err); code != 0 || strings.TrimSpace(out.String()) != "cfr_test" ||
			!slices.Equal(bearers, []string{tc.want}) {
			t.Errorf("%s: exit %d %s, stdout %q, bearers %q; want %q", tc.name, code, msg, out.String(), bearers, tc.want)
		}
	}
	res := runCLI(t, append(base, "--depositor-token", "eyJ.a.b")...)
	if res.exit != exitFailed || !strings.Contains(res.stderr, "unknown flag: --depositor-token") {
		t.Fatalf("--depositor-token: exit %d, stderr %q", res.exit, res.stderr)
	}
}

// TestClientSecretsFromStdin: train and status take a token file "-" as
// standard input, once per command; a server URL with a password is
// refused before anything is sent.
func TestClientSecretsFromStdin(t *testing.T) {
	tok, ent := exitClientFiles(t)
	var bearers []string
	s := newStub(t, 200, "")
	s.srv.Config.Handler = wrapBearer(s.srv.Config.Handler, &bearers)

	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetIn(strings.NewReader("caller.from.stdin\n"))
	root.SetArgs([]string{"status", "--server", s.srv.URL, "--token-file", "-", "--idempotency-key", "k1"})
	c, err := root.ExecuteC()
	if code, _ := exitStatus(c, err); code != 0 || !slices.Equal(bearers, []string{"Bearer caller.from.stdin"}) {
		t.Fatalf("status --token-file -: exit %d, bearers %q, stderr %q", code, bearers, errb.String())
	}

	res := runCLIStdin(t, "a.b.c\n", cancelArgs(s.srv.URL, "-", "-")...)
	if res.exit != exitFailed || !strings.Contains(res.stderr, "standard input is already --entitlement-file's") {
		t.Fatalf("two - files: exit %d, stderr %q", res.exit, res.stderr)
	}
	bearers = nil
	withPassword := strings.Replace(s.srv.URL, "http://", "http://user:hunter2@", 1)
	res = runCLI(t, cancelArgs(withPassword, tok, ent)...)
	if res.exit != exitFailed || !strings.Contains(res.stderr, "holds user credentials") || len(bearers) != 0 {
		t.Fatalf("URL with a password: exit %d, stderr %q, %d requests", res.exit, res.stderr, len(bearers))
	}
}

func wrapBearer(h http.Handler, into *[]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*into = append(*into, r.Header.Get("Authorization"))
		h.ServeHTTP(w, r)
	})
}

// TestRevokerTokenNeverAnArgument: itogate revoke takes the revoker's (or,
// for a confirmation, the depositor's) bearer token from its file flag,
// standard input (-) or the environment, and sends it as the bearer;
// --revoker-token is no flag.
func TestRevokerTokenNeverAnArgument(t *testing.T) {
	var bearers []string
	s := newStub(t, 200, "")
	s.srv.Config.Handler = wrapBearer(s.srv.Config.Handler, &bearers)
	file := filepath.Join(t.TempDir(), "revoker.jwt")
	writeMode(t, file, []byte("from.the.file\n"), 0o600)
	base := []string{"revoke", "booking", "--server", s.srv.URL, "--booking", "bk_1", "--expires-at", "2099-01-01T00:00:00Z"}
	t.Setenv("ITOGATE_REVOKER_TOKEN", "from.the.env")
	t.Setenv("ITOGATE_DEPOSITOR_TOKEN", "desk.from.the.env")
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"file", []string{"--revoker-token-file", file}, "", "Bearer from.the.file"},
		{"standard input", []string{"--revoker-token-file", "-"}, "from.stdin\n", "Bearer from.stdin"},
		{"environment", nil, "", "Bearer from.the.env"},
		{"the depositor's, for a confirmation", nil, "", "Bearer desk.from.the.env"},
	} {
		bearers = nil
		args := append(slices.Clone(base), tc.args...)
		if strings.HasPrefix(tc.name, "the depositor") {
			args = []string{"revoke", "confirmation", "--server", s.srv.URL, "--ref", "cfr_" + strings.Repeat("0", 32)}
		}
		res := runCLIStdin(t, tc.stdin, args...)
		if res.exit != 0 || !slices.Equal(bearers, []string{tc.want}) {
			t.Errorf("%s: exit %d, stderr %q, bearers %q; want %q", tc.name, res.exit, res.stderr, bearers, tc.want)
		}
	}
	bearers = nil
	res := runCLI(t, append(base, "--revoker-token", "eyJ.a.b")...)
	if res.exit != exitFailed || !strings.Contains(res.stderr, "unknown flag: --revoker-token") || len(bearers) != 0 {
		t.Fatalf("--revoker-token: exit %d, stderr %q, %d requests", res.exit, res.stderr, len(bearers))
	}
}
