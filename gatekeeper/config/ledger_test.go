package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLedgerPostgres loads good.yml with a postgres ledger section.
func TestLedgerPostgres(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile(filepath.Join("testdata", "good.yml"))
	if err != nil {
		t.Fatal(err)
	}
	yml := strings.Replace(string(good), "ledger: {driver: bbolt}", `ledger:
  driver: postgres
  dsn: postgres://itogate@db.internal:5432/itogate?sslmode=verify-full
  schema: itogate_prod
  max_conns: 8
  statement_timeout: 2s
  pooler: transaction
  sweep_interval: 0s`, 1)
	path := filepath.Join(t.TempDir(), "itogate.yml")
	// Relative key paths resolve against the config file's directory; the
	// keys are not read by Load.
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	l := c.Ledger
	if l.Driver != DriverPostgres || l.Schema != "itogate_prod" || l.MaxConns != 8 ||
		time.Duration(l.StatementTimeout) != 2*time.Second || l.Pooler != PoolerTransaction || l.SweepInterval == nil || *l.SweepInterval != 0 {
		t.Fatalf("ledger %+v", l)
	}
}

// Each bad ledger section is refused with the reason named, and never
// echoes the DSN.
func TestLedgerBad(t *testing.T) {
	t.Parallel()
	neg := Duration(-time.Second)
	const dsn = "postgres://itogate:s3cr3t@db/itogate"
	cases := map[string]struct {
		l    Ledger
		want string
	}{
		"unknown driver":       {Ledger{Driver: "sqlite"}, `driver "sqlite" is not supported`},
		"postgres without dsn": {Ledger{Driver: DriverPostgres}, "dsn is required"},
		"postgres with path":   {Ledger{Driver: DriverPostgres, DSN: dsn, Path: "x.db"}, "path is for driver bbolt"},
		"bad schema":           {Ledger{Driver: DriverPostgres, DSN: dsn, Schema: "Itogate; DROP"}, "schema must match"},
		"too many conns":       {Ledger{Driver: DriverPostgres, DSN: dsn, MaxConns: 5000}, "max_conns"},
		"negative timeout":     {Ledger{Driver: DriverPostgres, DSN: dsn, AcquireTimeout: neg}, "acquire_timeout must not be negative"},
		"negative sweep":       {Ledger{Driver: DriverBolt, SweepInterval: &neg}, "sweep_interval must not be negative"},
		"bbolt with dsn":       {Ledger{Driver: DriverBolt, DSN: dsn}, "are for driver postgres"},
		"bbolt with pooler":    {Ledger{Driver: DriverBolt, Pooler: PoolerTransaction}, "are for driver postgres"},
		"unknown pooler":       {Ledger{Driver: DriverPostgres, DSN: dsn, Pooler: "session"}, `pooler must be "none" or "transaction"`},
	}
	for name, tc := range cases {
		err := tc.l.validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate = %v, want %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error echoes the dsn: %v", name, err)
		}
	}
	ok := []Ledger{
		{Driver: DriverBolt},
		{Driver: DriverBolt, Path: "/var/lib/itogate/ledger.db"},
		{Driver: DriverPostgres, DSN: dsn},
		{Driver: DriverPostgres, DSN: dsn, Pooler: PoolerNone},
		{Driver: DriverPostgres, DSN: dsn, Pooler: PoolerTransaction},
	}
	for _, l := range ok {
		if err := l.validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
