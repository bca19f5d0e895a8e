#!/usr/bin/env bash
# Prints the DSN of a PgBouncer in transaction mode in front of the test
# PostgreSQL server (hack/test-postgres.sh), starting it when it is not
# running. The ledger's PostgreSQL tests run their conformance suite through
# it with ledger.pooler: transaction (`make test`, .ci/run).
#
#   ITOGATE_TEST_PGBOUNCER_DSN set      → that DSN, checked reachable
#   ITOGATE_TEST_PGBOUNCER=skip, or the PostgreSQL tests skipped
#                                       → prints nothing: the pooler tests skip,
#                                         and the test summary lists them
#   otherwise                           → the machine's pgbouncer binary
#                                         (Debian: apt-get install pgbouncer),
#                                         started on 127.0.0.1:$ITOGATE_TEST_PGBOUNCER_PORT
#                                         (default 16432) with its files in
#                                         $ITOGATE_TEST_PGBOUNCER_DIR
#                                         (default /tmp/itogate-pgbouncer-$UID)
#
# Anything else fails loudly, naming the variable.
set -euo pipefail

if [ "${ITOGATE_TEST_PGBOUNCER:-}" = "skip" ]; then
  echo "test-pgbouncer: ITOGATE_TEST_PGBOUNCER=skip: the pooler tests will be skipped" >&2
  exit 0
fi
if [ -n "${ITOGATE_TEST_PGBOUNCER_DSN:-}" ]; then
  if ! psql "$ITOGATE_TEST_PGBOUNCER_DSN" -Atqc 'SELECT 1' >/dev/null 2>&1; then
    echo "test-pgbouncer: nothing answers at ITOGATE_TEST_PGBOUNCER_DSN (${ITOGATE_TEST_PGBOUNCER_DSN%%\?*})" >&2
    exit 1
  fi
  echo "$ITOGATE_TEST_PGBOUNCER_DSN"
  exit 0
fi

upstream="$(cd "$(dirname "$0")" && ./test-postgres.sh)"
if [ -z "$upstream" ]; then
  echo "test-pgbouncer: the PostgreSQL tests are skipped, so are the pooler tests" >&2
  exit 0
fi

# A fresh Debian machine (CI, a newcomer's `make test` as root) gets it
# from Debian's packages, as PostgreSQL itself comes from them.
if ! command -v pgbouncer >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test-pgbouncer: installing Debian's pgbouncer package" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null; } || true
fi

if ! command -v pgbouncer >/dev/null; then
  cat >&2 <<MSG
test-pgbouncer: no pgbouncer binary. The ledger's conformance suite runs
  through a PgBouncer in transaction mode (ledger.pooler: transaction). Either
    - install it (Debian: apt-get install pgbouncer; nothing needs to be
      configured: this script starts its own), or
    - set ITOGATE_TEST_PGBOUNCER_DSN to a PgBouncer in transaction mode in
      front of the test server, or
    - set ITOGATE_TEST_PGBOUNCER=skip to run without it (the summary lists
      every skipped test).
MSG
  exit 1
fi

port="${ITOGATE_TEST_PGBOUNCER_PORT:-16432}"
dir="${ITOGATE_TEST_PGBOUNCER_DIR:-/tmp/itogate-pgbouncer-$(id -u)}"
# Where the upstream server is, as the server itself reports it.
IFS='|' read -r host pgport db user < <(psql "$upstream" -Atqc \
  "SELECT coalesce(host(inet_server_addr()), '127.0.0.1'), inet_server_port(), current_database(), current_user")
dsn="postgres://${user}@127.0.0.1:${port}/${db}?sslmode=disable"

answers() { psql "$dsn" -Atqc 'SELECT 1' >/dev/null 2>&1; }

mkdir -p "$dir"
exec 9>"$dir/start.lock"
flock 9
if ! answers; then
  # PgBouncer refuses to run as root: root runs it as the PostgreSQL
  # server's owner.
  runas=()
  if [ "$(id -u)" = 0 ]; then
    owner=postgres
    chown "$owner" "$dir"
    runas=(runuser -u "$owner" --)
  fi
  # auth_type any: the test server trusts local connections, and the one
  # database entry logs in as the test role. pool_mode transaction is the
  # point; the pool is small against the server's max_connections, since
  # the tests' clients queue in PgBouncer instead.
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
${db} = host=${host} port=${pgport} dbname=${db} user=${user}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 20
max_client_conn = 2000
max_db_connections = 30
server_reset_query =
ignore_startup_parameters =
logfile = ${dir}/pgbouncer.log
pidfile = ${dir}/pgbouncer.pid
INI
  chmod 0644 "$dir/pgbouncer.ini"
  [ -n "${runas[*]}" ] && chown "$owner" "$dir/pgbouncer.ini"
  echo "test-pgbouncer: starting $(pgbouncer --version | head -1) in transaction mode on 127.0.0.1:${port} ($dir)" >&2
  # 9>&-: the daemon must not inherit (and hold) the start lock.
  "${runas[@]}" pgbouncer -d "$dir/pgbouncer.ini" >&2 9>&-
  for _ in $(seq 1 30); do
    answers && break
    sleep 1
  done
fi
if ! answers; then
  echo "test-pgbouncer: PgBouncer does not answer at ${dsn%%\?*}; its log: $dir/pgbouncer.log" >&2
  exit 1
fi
echo "$dsn"
