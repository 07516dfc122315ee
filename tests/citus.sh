#!/usr/bin/env bash
# make test-citus: the service's schema on a Citus cluster on this machine (issue 29).
#
# Citus (default v13.2.2, the last line for PostgreSQL 15) built from source against
# Debian's PostgreSQL 15, pgvector as deploy/external-postgres.sh builds it, a coordinator
# and two workers on 127.0.0.1 (trust logins on loopback: a throwaway lab), the README's
# roles, `brain-admin migrate` as brain_owner against the coordinator (migration 0057 takes
# the subqueries out of three policies there), deploy/citus/distribute.sql, then
# tests/citus_checks.py. brain-server then serves as brain_server through the coordinator,
# the tests of CITUS_TESTS (pytest paths; a default list below) run against it, and a
# third worker joins while a writer runs, then one tenant moves to another worker and
# another is isolated to shards of its own, each under its writer (tests/citus_rebalance.py).
# deploy/SCALING.md says what passes and what does not yet. Needs root; minutes.
# Not part of `make test`. Everything lives in one temporary folder, removed afterwards
# (CITUS_KEEP=1 keeps the cluster running and prints how to reach it).
#
#   CITUS_SRC=DIR    a Citus source tree to build (default: git clone of CITUS_VERSION)
#   CITUS_VERSION    the tag to clone (default v13.2.2)
#   CITUS_REBUILD=1  build and install even when that version is installed
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$HERE/.venv}
PY=$VENV/bin/python
PG_BIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PG_BIN/pg_config
CITUS_VERSION=${CITUS_VERSION:-v13.2.2}

say() { printf '== %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "make test-citus needs root (apt-get, make install, runuser)" >&2; exit 1; }
ROOT=$(mktemp -d /tmp/brain-citus.XXXXXX)
chmod 755 "$ROOT"
NODES=(coordinator worker1 worker2)
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" || true; fi
    [ "${CITUS_KEEP:-}" = 1 ] && return
    for node in "${NODES[@]}"; do
        if [ -f "$ROOT/$node/postmaster.pid" ]; then
            runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$ROOT/$node" -m fast -w stop >/dev/null || true
        fi
    done
    rm -rf "$ROOT"
}
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

install_pgvector() {
    [ -f "$("$PG_CONFIG" --sharedir)/extension/vector.control" ] && return
    say "pgvector, as deploy/external-postgres.sh builds it (on a throwaway cluster)"
    "$HERE/deploy/external-postgres.sh" start "$ROOT/pgvector" "$(free_port)"
    "$HERE/deploy/external-postgres.sh" stop "$ROOT/pgvector"
}

install_citus() {
    local lib
    lib=$("$PG_CONFIG" --pkglibdir)/citus.so
    if [ -z "${CITUS_REBUILD:-}" ] && [ -f "$lib" ] && grep -qx "${CITUS_VERSION#v}" <(strings "$lib"); then
        say "Citus ${CITUS_VERSION#v} already installed"
        return
    fi
    say "building Citus $CITUS_VERSION against $("$PG_CONFIG" --version)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "postgresql-server-dev-15" liblz4-dev libzstd-dev libkrb5-dev libcurl4-openssl-dev \
        autoconf flex bison gcc make git >/dev/null
    local src=$ROOT/citus-src
    if [ -n "${CITUS_SRC:-}" ]; then
        cp -a "$CITUS_SRC/." "$src"
    else
        git clone -q --depth 1 --branch "$CITUS_VERSION" https://github.com/citusdata/citus "$src"
    fi
    # PostgreSQL 15.20's headers declare have_createdb_privilege(), which Citus 13.2.2 also
    # defines as a static function ("static declaration follows non-static declaration"):
    # when the server header has it, Citus's copy goes.
    if grep -q "have_createdb_privilege" "$("$PG_CONFIG" --includedir-server)/commands/dbcommands.h"; then
        "$PY" - "$src/src/include/pg_version_compat.h" <<'EOF'
import sys
path = sys.argv[1]
lines = open(path).read().split("\n")
if "have_createdb_privilege(void)" in lines:
    i = lines.index("have_createdb_privilege(void)")
    assert lines[i - 1] == "static inline bool", lines[i - 1]
    j = next(k for k in range(i, len(lines)) if lines[k] == "}")
    lines[i - 1 : j + 1] = ['#include "commands/dbcommands.h"  /* declared there since 15.20 */']
    open(path, "w").write("\n".join(lines))
EOF
    fi
    (cd "$src" && ./configure -q PG_CONFIG="$PG_CONFIG" >/dev/null && make -s -j"$(nproc)" >/dev/null 2>&1 \
        && make -s install >/dev/null)
}

start_node() {  # name port
    local data=$ROOT/$1
    install -d -m 700 -o postgres "$data"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$data" -U postgres -E UTF8 --locale=C -A trust >/dev/null
    cat >>"$data/postgresql.conf" <<EOF
port = $2
listen_addresses = '127.0.0.1'
unix_socket_directories = '$ROOT/socket'
shared_preload_libraries = 'citus,pg_stat_statements'
# Which statements ran on one shard (partition_key set) and which on all (the report below).
citus.stat_statements_track = 'all'
# Shard moves and rebalancing use logical replication.
wal_level = logical
# Transactions over several workers commit by two-phase commit.
max_prepared_transactions = 100
max_connections = 200
# The audit, lexical-statistics and scope triggers fire on the workers' shards.
citus.enable_unsafe_triggers = on
# Request settings travel as SET LOCAL (server/storage/setlocal.py); 'local' sends them on.
citus.propagate_set_commands = 'local'
# Worker backends that query distributed tables from inside a shard's trigger grow (issue 29).
citus.max_cached_connection_lifetime = '60s'
# Lab only: RLS policies and definer functions that read other distributed tables run a
# distributed query from inside a shard query; Citus refuses that unless this is on, and
# calls it unsafe (deploy/SCALING.md, "What does not work yet", item 5).
citus.allow_nested_distributed_execution = on
fsync = off
EOF
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start >/dev/null \
        || { cat "$data/server.log" >&2; exit 1; }
}

psql_on() {  # port user db [psql args]
    local port=$1 user=$2 db=$3
    shift 3
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$user" -d "$db" "$@"
}

install_pgvector
install_citus
install -d -m 700 -o postgres "$ROOT/socket"
PORTS=()
for node in "${NODES[@]}"; do
    port=$(free_port)
    PORTS+=("$port")
    start_node "$node" "$port"
done
COORD=${PORTS[0]}
say "a coordinator on 127.0.0.1:$COORD, workers on ${PORTS[1]} and ${PORTS[2]}"

# README "Deployment" on every node (roles are cluster-wide, Citus propagates them once the
# nodes are added; CREATE DATABASE it does not), then the extensions as the superuser:
# pgvector is not a trusted extension. LEAKPROOF marks are per node.
prepare_node() {  # port
    psql_on "$1" postgres postgres <<'SQL'
CREATE ROLE brain_owner LOGIN;
CREATE ROLE brain_app NOLOGIN;
CREATE ROLE brain_server LOGIN IN ROLE brain_app NOBYPASSRLS;
CREATE DATABASE brain OWNER brain_owner;
SQL
    psql_on "$1" postgres brain -c "CREATE EXTENSION citus" -c "CREATE EXTENSION vector" \
        -c "CREATE EXTENSION pg_stat_statements" \
        -c "ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF"
}
for port in "${PORTS[@]}"; do
    prepare_node "$port"
done
psql_on "$COORD" postgres brain -c "SELECT citus_set_coordinator_host('127.0.0.1', $COORD)" \
    -c "SELECT citus_add_node('127.0.0.1', ${PORTS[1]})" \
    -c "SELECT citus_add_node('127.0.0.1', ${PORTS[2]})" >/dev/null

OWNER_URL=postgresql://brain_owner@127.0.0.1:$COORD/brain
APP_URL=postgresql://brain_server@127.0.0.1:$COORD/brain
(umask 077 && head -c 32 /dev/urandom >"$ROOT/pepper")
export BRAIN_PEPPER_FILE=$ROOT/pepper

say "brain-admin migrate as brain_owner on the coordinator"
"$VENV/bin/brain-admin" --database-url "$OWNER_URL" migrate
say "deploy/citus/distribute.sql"
psql_on "$COORD" brain_owner brain -f "$HERE/deploy/citus/distribute.sql" >/dev/null
psql_on "$COORD" brain_owner brain -At -c \
    "SELECT count(*) FILTER (WHERE partmethod = 'h') || ' distributed, ' ||
            count(*) FILTER (WHERE partmethod = 'n') || ' reference tables'
     FROM pg_dist_partition"

say "checks on the cluster (tests/citus_checks.py)"
"$PY" "$HERE/tests/citus_checks.py" "$OWNER_URL" "$APP_URL"

# The foundation, isolation, authorization, lifecycle, audit, review, knowledge (and its
# chunk filler) and graph tests, and
# tests/test_citus_plans.py (every statement of a tenant's request is a one-shard plan).
CITUS_TESTS=${CITUS_TESTS-tests/test_citus_plans.py tests/test_foundation.py tests/test_isolation.py \
tests/test_authz.py tests/test_lifecycle.py tests/test_audit.py tests/test_review.py \
tests/test_knowledge.py tests/test_knowledge_filler.py tests/test_graph.py}
GRPC_PORT=$(free_port)
"$VENV/bin/brain-admin" certs dev --out "$ROOT/tls" >/dev/null
say "brain-server as brain_server through the coordinator on 127.0.0.1:$GRPC_PORT"
BRAIN_DATABASE_URL=$APP_URL BRAIN_LISTEN=127.0.0.1:$GRPC_PORT BRAIN_EMBEDDER=none \
    BRAIN_TLS_CERT=$ROOT/tls/server.pem BRAIN_TLS_KEY=$ROOT/tls/server-key.pem \
    BRAIN_RATE_LIMIT=1000 BRAIN_RATE_BURST=1000 BRAIN_LOG_LEVEL=warning BRAIN_WORKERS=1 \
    "$VENV/bin/brain-server" 2>"$ROOT/server.log" &
SERVER_PID=$!
for _ in $(seq 120); do
    (exec 3<>"/dev/tcp/127.0.0.1/$GRPC_PORT") 2>/dev/null && break
    kill -0 "$SERVER_PID" || { cat "$ROOT/server.log" >&2; exit 1; }
    sleep 0.5
done
if [ -n "$CITUS_TESTS" ]; then
    say "tests against the cluster: $CITUS_TESTS"
    cd "$HERE"
    # shellcheck disable=SC2086
    BRAIN_TEST_ADMIN_DATABASE_URL=$OWNER_URL BRAIN_TEST_DATABASE_URL=$APP_URL \
        BRAIN_TEST_PEPPER_FILE=$BRAIN_PEPPER_FILE BRAIN_TEST_TARGET=127.0.0.1:$GRPC_PORT \
        BRAIN_TEST_TLS_CA=$ROOT/tls/ca.pem \
        "$PY" -m pytest -q -p no:cacheprovider -rA --tb=short $CITUS_TESTS "$@" || status=$?
    say "statements of brain_server that ran on every shard (citus_stat_statements; one-shard runs: partition_key set)"
    psql_on "$COORD" postgres brain -At -F ' | ' -c \
        "SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 160)
         FROM citus_stat_statements s JOIN pg_roles r ON r.oid = s.userid
         WHERE r.rolname = 'brain_server' AND s.partition_key IS NULL
         ORDER BY calls DESC LIMIT 40"
    psql_on "$COORD" postgres brain -At -c \
        "SELECT count(*) FILTER (WHERE partition_key IS NOT NULL) || ' one-shard, ' ||
                count(*) FILTER (WHERE partition_key IS NULL) || ' all-shard statements of brain_server'
         FROM citus_stat_statements s JOIN pg_roles r ON r.oid = s.userid
         WHERE r.rolname = 'brain_server'"
fi

# A third worker joins and the shards move onto it while a writer runs (tests/citus_rebalance.py).
NODES+=(worker3)
port=$(free_port)
start_node worker3 "$port"
prepare_node "$port"
say "worker3 on $port joins; rebalancing, then moving and isolating tenants, while writers save through brain-server"
"$PY" "$HERE/tests/citus_rebalance.py" "postgresql://postgres@127.0.0.1:$COORD/brain" "$OWNER_URL" \
    "127.0.0.1:$GRPC_PORT" "$ROOT/tls/ca.pem" "$BRAIN_PEPPER_FILE" "$port" || status=${status:-$?}
[ "${status:-0}" -eq 0 ] || exit "$status"
if [ "${CITUS_KEEP:-}" = 1 ]; then
    say "kept: $ROOT; owner $OWNER_URL, app $APP_URL (stop: pg_ctl -D $ROOT/<node> stop as postgres)"
fi
