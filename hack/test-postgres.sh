#!/usr/bin/env bash
# Prints the PostgreSQL DSN the ledger tests run against (`make test`,
# .ci/run), starting the machine's local server when it is not running.
#
#   ITOGATE_TEST_POSTGRES_DSN set      → that DSN, checked reachable
#   unset, a server on 127.0.0.1:5432  → postgres://postgres@127.0.0.1:5432/test
#                                        (started first with pg_ctlcluster if
#                                        the cluster is installed but down)
#   ITOGATE_TEST_POSTGRES=skip         → prints nothing: the PostgreSQL tests
#                                        skip, and the test summary lists them
#
# Anything else fails loudly, naming the variable: a run that silently skips
# the PostgreSQL ledger would report a store as tested that never ran.
set -euo pipefail

if [ "${ITOGATE_TEST_POSTGRES:-}" = "skip" ]; then
  echo "test-postgres: ITOGATE_TEST_POSTGRES=skip: the PostgreSQL ledger tests will be skipped" >&2
  exit 0
fi

dsn="${ITOGATE_TEST_POSTGRES_DSN:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"

if [ -z "${ITOGATE_TEST_POSTGRES_DSN:-}" ] && ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    for version in $(ls /etc/postgresql); do
      echo "test-postgres: starting PostgreSQL $version (pg_ctlcluster)" >&2
      pg_ctlcluster --skip-systemctl-redirect "$version" main start >&2 || true
    done
    for _ in $(seq 1 30); do
      pg_isready -q -h 127.0.0.1 -p 5432 && break
      sleep 1
    done
  fi
fi

if ! psql "$dsn" -Atqc 'SELECT 1' >/dev/null 2>&1; then
  cat >&2 <<MSG
test-postgres: no PostgreSQL server answers at ${dsn%%\?*}.
  The ledger's PostgreSQL tests (conformance suite, replicas, crash and
  fault tests) need one. Either
    - start a local server (trust auth, database "test"), or
    - set ITOGATE_TEST_POSTGRES_DSN to a server whose schemas the tests may
      create and drop, or
    - set ITOGATE_TEST_POSTGRES=skip to run without them (the summary lists
      every skipped test).
MSG
  exit 1
fi
echo "$dsn"
