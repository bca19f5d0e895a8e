// Package pgtest gives tests a PostgreSQL ledger of their own on the server
// named by ITOGATE_TEST_POSTGRES_DSN: a fresh schema per test, dropped when
// the test ends, so tests run in parallel and leave nothing behind.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the environment variable holding the test server's DSN. CI
// (.ci/run) sets it; without it the PostgreSQL tests skip.
const EnvDSN = "ITOGATE_TEST_POSTGRES_DSN"

// EnvPoolerDSN names the environment variable holding the DSN of a
// PgBouncer in transaction mode in front of the server of EnvDSN
// (hack/test-pgbouncer.sh); without it the pooler tests skip.
const EnvPoolerDSN = "ITOGATE_TEST_PGBOUNCER_DSN"

// PoolerDSN returns the pooler's DSN, or skips t when EnvPoolerDSN is unset.
func PoolerDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvPoolerDSN)
	if dsn == "" {
		t.Skipf("%s is not set: skipping the ledger test through a transaction pooler "+
			"(`make test` and .ci/run set it from hack/test-pgbouncer.sh)", EnvPoolerDSN)
	}
	return dsn
}

// SchemaPrefix starts every schema a test creates.
const SchemaPrefix = "itogate_test_"

// DSN returns the test server's DSN, or skips t when EnvDSN is unset.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		t.Skipf("%s is not set: skipping the PostgreSQL ledger test "+
			"(e.g. %s='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'; `make test` sets it from hack/test-postgres.sh)", EnvDSN, EnvDSN)
	}
	return dsn
}

// Schema returns a fresh schema name and drops the schema, with everything
// in it, when t ends. Register it before opening stores on it, so they are
// closed (their own cleanups run first) before the drop.
func Schema(t testing.TB, dsn string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := SchemaPrefix + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := Exec(ctx, dsn, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: dropping schema %s: %v", name, err)
		}
	})
	return name
}

// Exec runs one statement on a connection of its own.
func Exec(ctx context.Context, dsn, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// WithApp tags dsn's connections with an application_name unique to the
// test's schema ("<prefix>_<schema suffix>"), so the test can find and
// terminate exactly its own backends in pg_stat_activity. It returns the
// tagged DSN and the name.
func WithApp(dsn, prefix, schema string) (tagged, app string) {
	app = prefix + "_" + strings.TrimPrefix(schema, SchemaPrefix)
	return WithParam(dsn, "application_name", app), app
}

// WithParam returns dsn with the connection parameter name=value added, in
// URL (postgres://…) or keyword/value form.
func WithParam(dsn, name, value string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(name, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + name + "=" + value
}
