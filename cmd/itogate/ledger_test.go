//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres/pgtest"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/internal/patience"
)

// TestLedgerCheckBolt: `ledger check --file` reports a sound file's counts
// (exit 0), names the half-write of a broken one (exit 1), refuses a file
// a server holds (exit 3, naming the lock) and a file of another schema
// without migrating it.
func TestLedgerCheckBolt(t *testing.T) {
	good := boltLedger(t, false)
	res := runCLI(t, "ledger", "check", "--file", good)
	want := "bbolt " + good + ": consistent: 3 confirmations (1 available, 2 consumed, 0 expired; 0 tokens swept), 2 admissions, 2 runs\n"
	if res.exit != 0 || res.stdout != want {
		t.Fatalf("check good: exit %d\nstdout %q\nstderr %q\nwant %q", res.exit, res.stdout, res.stderr, want)
	}
	res = runCLI(t, "ledger", "check", "--file", good, "--json")
	var rep ledgerCheckReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.exit != 0 || !rep.Consistent ||
		rep.Counts.Admissions != 2 || rep.Counts.Available != 1 || rep.Problems != "" {
		t.Fatalf("check --json: exit %d, %+v, %v", res.exit, rep, err)
	}

	bad := boltLedger(t, true)
	res = runCLI(t, "ledger", "check", "--file", bad)
	if res.exit != exitLedgerInconsistent || !strings.Contains(res.stdout, ": INCONSISTENT: ") ||
		!strings.Contains(res.stdout, "consumed by k2") {
		t.Fatalf("check broken: exit %d\nstdout %q\nstderr %q", res.exit, res.stdout, res.stderr)
	}

	s, err := bolt.Open(good, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, "ledger", "check", "--file", good)
	s.Close()
	if res.exit != exitLedgerOther || !strings.Contains(res.stderr, "holds "+good) {
		t.Fatalf("check a held file: exit %d, stderr %q", res.exit, res.stderr)
	}

	// Another schema: refused, and the file is left as it was.
	db, err := bbolt.Open(good, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte("3")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	res = runCLI(t, "ledger", "check", "--file", good)
	if res.exit != exitLedgerOther || !strings.Contains(res.stderr, `schema version "3"`) {
		t.Fatalf("check schema 3: exit %d, stderr %q", res.exit, res.stderr)
	}
	db, err = bbolt.Open(good, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bbolt.Tx) error {
		if v := string(tx.Bucket([]byte("meta")).Get([]byte("schema"))); v != "3" {
			t.Errorf("schema after a read-only check: %q, want 3 (not migrated)", v)
		}
		return nil
	})
}

// TestLedgerCheckPostgres: `ledger check --postgres` with the DSN from
// $ITOGATE_LEDGER_DSN, on a sound schema (exit 0) and after a half-write
// (exit 1); without the variable it is bad input (exit 4).
func TestLedgerCheckPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	admitOne(t, s, "k1")
	c := admitOne(t, s, "k2")
	s.Close()

	t.Setenv(envLedgerDSN, "")
	if res := runCLI(t, "ledger", "check", "--postgres", "--schema", schema); res.exit != exitFailed ||
		!strings.Contains(res.stderr, envLedgerDSN) {
		t.Fatalf("check without the DSN: exit %d, stderr %q", res.exit, res.stderr)
	}
	t.Setenv(envLedgerDSN, dsn)
	res := runCLI(t, "ledger", "check", "--postgres", "--schema", schema)
	want := "postgres schema " + schema + ": consistent: 2 confirmations (0 available, 2 consumed, 0 expired; 0 tokens swept), 2 admissions, 2 runs\n"
	if res.exit != 0 || res.stdout != want {
		t.Fatalf("check: exit %d\nstdout %q\nstderr %q\nwant %q", res.exit, res.stdout, res.stderr, want)
	}
	if err := pgtest.Exec(ctx, dsn, fmt.Sprintf("UPDATE %s.confirmations SET consumed_by = 'ghost' WHERE ref = $1",
		pgx.Identifier{schema}.Sanitize()), c.Ref); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, "ledger", "check", "--postgres", "--schema", schema)
	if res.exit != exitLedgerInconsistent || !strings.Contains(res.stdout, "consumed by ghost without an admission") {
		t.Fatalf("check broken: exit %d\nstdout %q\nstderr %q", res.exit, res.stdout, res.stderr)
	}
}

// TestLedgerRestore: `ledger restore` puts a backup in place for a stopped
// server with its hold (an hour of confirmation lifetime plus the longest
// leeway, at least), keeps the file it replaces, and the result checks
// consistent; without --max-confirmation-lifetime it is bad input.
func TestLedgerRestore(t *testing.T) {
	backup := boltLedger(t, false)
	to := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(to, []byte("the old file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := runCLI(t, "ledger", "restore", "--backup", backup, "--to", to); res.exit != exitFailed ||
		!strings.Contains(res.stderr, "max-confirmation-lifetime") {
		t.Fatalf("restore without the lifetime: exit %d, stderr %q", res.exit, res.stderr)
	}
	before := time.Now()
	res := runCLI(t, "ledger", "restore", "--backup", backup, "--to", to, "--max-confirmation-lifetime", "1h")
	if res.exit != 0 || !strings.Contains(res.stdout, "restored "+backup+" to "+to+": 3 confirmations (1 available), 2 admissions, 2 runs\n") ||
		!strings.Contains(res.stdout, "the file it replaced: "+to+".before-restore-") {
		t.Fatalf("restore: exit %d\nstdout %q\nstderr %q", res.exit, res.stdout, res.stderr)
	}
	s, err := bolt.Open(to, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hold := s.HoldUntil()
	if hold.Before(before.Add(time.Hour+config.MaxLeeway)) || !strings.Contains(res.stdout, "held until "+hold.Format(time.RFC3339)) {
		t.Fatalf("hold until %v; want at least an hour and the leeway from %v (stdout %q)", hold, before, res.stdout)
	}
	if err := s.Ping(t.Context()); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Ping of the restored ledger = %v, want unavailable during the hold", err)
	}
	s.Close()
	if res := runCLI(t, "ledger", "check", "--file", to); res.exit != 0 {
		t.Fatalf("check the restored file: exit %d, %q %q", res.exit, res.stdout, res.stderr)
	}
	if b, err := os.ReadFile(strings.TrimSpace(strings.TrimPrefix(res.stdout[strings.Index(res.stdout, "the file it replaced: "):strings.Index(res.stdout, "\nheld")], "the file it replaced: "))); err != nil || string(b) != "the old file" {
		t.Fatalf("the replaced file: %q, %v", b, err)
	}
}

// TestServeBacksUpOnSIGUSR1: SIGUSR1 to a running serve writes a backup of
// its bbolt ledger into <data_dir>/backups, logged; the backup checks
// consistent with `ledger check`.
func TestServeBacksUpOnSIGUSR1(t *testing.T) {
	o := &serveOptions{}
	_, logs := startServe(t, o, true)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var path string
	patience.Until(t, "ledger backup written", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			var l struct{ Msg, Path string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "ledger backup written" {
				path = l.Path
				return true
			}
		}
		return false
	})
	if filepath.Dir(path) != filepath.Join(o.dataDir, "backups") {
		t.Fatalf("backup at %s, want under %s/backups", path, o.dataDir)
	}
	if res := runCLI(t, "ledger", "check", "--file", path); res.exit != 0 || !strings.Contains(res.stdout, ": consistent: ") {
		t.Fatalf("check the backup: exit %d, %q %q", res.exit, res.stdout, res.stderr)
	}
}

// TestServeRefusesDSNPassword: a PostgreSQL DSN with a password on serve's
// command line is refused as bad input, without echoing it; the password
// belongs in PGPASSWORD, PGPASSFILE or the configuration file.
func TestServeRefusesDSNPassword(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--ledger-dsn", "postgres://itogate:s3cr3t@127.0.0.1:1/itogate"},
		{"serve", "--set", "ledger.driver=postgres", "--set", "ledger.dsn=host=127.0.0.1 port=1 password=s3cr3t"},
		{"serve", "--ledger-dsn", "postgresql://itogate@127.0.0.1:1/itogate?password=s3cr3t"},
	} {
		res := runCLI(t, args...)
		if res.exit != exitFailed || !strings.Contains(res.stderr, "holds a password") || strings.Contains(res.stderr, "s3cr3t") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming the rule, not the password", args, res.exit, res.stderr, exitFailed)
		}
	}
	for dsn, want := range map[string]bool{
		"postgres://itogate@db/itogate?sslmode=verify-full": false,
		"host=db user=itogate dbname=itogate":               false,
		"host=db user=itogate passfile=/run/pgpass":         false,
		"postgres://itogate:pw@db/itogate":                  true,
		"host=db password = pw":                             true,
	} {
		if got := dsnHasPassword(dsn); got != want {
			t.Errorf("dsnHasPassword(%q) = %v, want %v", dsn, got, want)
		}
	}
}

// TestKeygenJWKSFrom: keygen --jwks-from turns a public PEM into a JWKS with
// its kid and the algorithm its type implies; --merge-jwks keeps the old
// set's keys beside it (the JWKS of a rotation), refuses a kid already
// there, and no file is overwritten. The result verifies tokens of either
// key.
func TestKeygenJWKSFrom(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"old", "new"} {
		if res := runCLI(t, "keygen", "--name", n, "--dir", dir); res.exit != 0 {
			t.Fatalf("keygen %s: %+v", n, res)
		}
	}
	res := runCLI(t, "keygen", "--name", "callers-1", "--dir", dir, "--key-id", "caller-1", "--jwks-from", filepath.Join(dir, "old.pub.pem"))
	if res.exit != 0 || !strings.Contains(res.stdout, "(1 keys; added kid caller-1, alg ES256, fingerprint sha256:") {
		t.Fatalf("jwks-from: %+v", res)
	}
	res = runCLI(t, "keygen", "--name", "callers-2", "--dir", dir, "--key-id", "caller-2",
		"--jwks-from", filepath.Join(dir, "new.pub.pem"), "--merge-jwks", filepath.Join(dir, "callers-1.jwks.json"))
	if res.exit != 0 || !strings.Contains(res.stdout, "(2 keys; added kid caller-2, alg ES256") {
		t.Fatalf("merge: %+v", res)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "callers-2.jwks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct{ Kid, Alg, Use string } `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil || len(set.Keys) != 2 || set.Keys[0].Kid != "caller-1" ||
		set.Keys[1].Kid != "caller-2" || set.Keys[1].Alg != "ES256" || set.Keys[1].Use != "sig" {
		t.Fatalf("merged JWKS %s: %+v, %v", raw, set, err)
	}
	// Tokens of the old key and of the new one both verify with it.
	for kid, key := range map[string]string{"caller-1": "old.key.pem", "caller-2": "new.key.pem"} {
		tok := runCLI(t, "token", "caller", "--key", filepath.Join(dir, key), "--kid", kid, "--issuer", "https://idp.example.com",
			"--audience", "itogate", "--account", "acct_1")
		if tok.exit != 0 {
			t.Fatalf("token %s: %+v", kid, tok)
		}
		ks, err := verify.LoadJWKS(raw)
		if err != nil {
			t.Fatal(err)
		}
		v, err := verify.NewTokenVerifier(verify.TokenOptions{Purpose: verify.PurposeCaller, Issuer: "https://idp.example.com",
			Audience: "itogate", Keys: ks})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify([]byte(strings.TrimSpace(tok.stdout)), time.Now()); err != nil {
			t.Errorf("a token of %s does not verify with the merged JWKS: %v", kid, err)
		}
	}
	res = runCLI(t, "keygen", "--name", "callers-3", "--dir", dir, "--key-id", "caller-2",
		"--jwks-from", filepath.Join(dir, "new.pub.pem"), "--merge-jwks", filepath.Join(dir, "callers-2.jwks.json"))
	if res.exit != exitFailed || !strings.Contains(res.stderr, `already holds kid "caller-2"`) {
		t.Fatalf("duplicate kid: %+v", res)
	}
	res = runCLI(t, "keygen", "--name", "callers-1", "--dir", dir, "--jwks-from", filepath.Join(dir, "old.pub.pem"))
	if res.exit != exitOther || !strings.Contains(res.stderr, "exists") {
		t.Fatalf("overwrite: %+v", res)
	}
}

// TestLedgerRestorePostgres: after a PostgreSQL ledger is restored with
// pg_restore, `ledger restore --postgres` checks it and writes its hold (an
// hour of confirmation lifetime plus the longest leeway, at least); a
// server started on it is not ready, /readyz naming the hold, and refuses
// a deposit with 503 LEDGER_UNAVAILABLE — the bbolt hold's code path.
// Without the DSN, or with --to, it is bad input.
func TestLedgerRestorePostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	admitOne(t, s, "k1")
	s.Close()

	t.Setenv(envLedgerDSN, "")
	if res := runCLI(t, "ledger", "restore", "--postgres", "--schema", schema, "--max-confirmation-lifetime", "1h"); res.exit != exitFailed ||
		!strings.Contains(res.stderr, envLedgerDSN) {
		t.Fatalf("without the DSN: exit %d, stderr %q", res.exit, res.stderr)
	}
	t.Setenv(envLedgerDSN, dsn)
	if res := runCLI(t, "ledger", "restore", "--postgres", "--to", filepath.Join(t.TempDir(), "l.db"),
		"--max-confirmation-lifetime", "1h"); res.exit != exitFailed {
		t.Fatalf("--postgres with --to: exit %d, stderr %q", res.exit, res.stderr)
	}
	before := time.Now()
	res := runCLI(t, "ledger", "restore", "--postgres", "--schema", schema, "--max-confirmation-lifetime", "1h",
		"--restored-from", "ledger-20260101.dump")
	m := regexp.MustCompile(`held until (\S+):`).FindStringSubmatch(res.stdout)
	if res.exit != 0 || m == nil || !strings.Contains(res.stdout, "held postgres schema "+schema+" (ledger-20260101.dump): 1 confirmations (0 available), 1 admissions, 1 runs") {
		t.Fatalf("restore --postgres: exit %d\nstdout %q\nstderr %q", res.exit, res.stdout, res.stderr)
	}
	hold, err := time.Parse(time.RFC3339, m[1])
	if err != nil || hold.Before(before.Add(time.Hour+config.MaxLeeway)) {
		t.Fatalf("held until %q (%v); want at least an hour and the leeway from now", m[1], err)
	}

	url, _ := startServe(t, &serveOptions{ledgerDSN: dsn, ledgerSchema: schema}, false)
	code, body := get(t, url+"/readyz")
	if want := "ledger restored from a backup: held until " + m[1]; code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Fatalf("/readyz = %d %s; want 503 naming %q", code, body, want)
	}
	dep := runCLI(t, "token", "confirmation", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"),
		"--deposit", "--server", url)
	if dep.exit == 0 || !strings.Contains(dep.stderr, "LEDGER_UNAVAILABLE") {
		t.Fatalf("deposit during the hold: exit %d, stdout %q, stderr %q", dep.exit, dep.stdout, dep.stderr)
	}
}
