#!/usr/bin/env bash
# make test-external: the README's deployment path, end to end, on this machine.
#
# Debian's PostgreSQL 15 + pgvector built from source (deploy/external-postgres.sh), the
# README's roles, `brain-admin migrate` as brain_owner over TCP with a password,
# brain-server as the NOBYPASSRLS login role brain_server serving TLS, a streaming standby
# and spare databases, then the isolation, authorization, lifecycle, schema, upgrade,
# backup and replica tests against them. Everything lives in one temporary folder,
# removed afterwards. Needs root (apt, runuser). Extra arguments go to pytest.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$HERE/.venv}
PY=$VENV/bin/python
TESTS=${EXTERNAL_TESTS:-tests/test_isolation.py tests/test_authz.py tests/test_authz_matrix.py tests/test_lifecycle.py tests/test_knowledge.py tests/test_deployment.py tests/test_replica.py}

[ "$(id -u)" -eq 0 ] || { echo "make test-external needs root (apt-get, runuser)" >&2; exit 1; }
ROOT=$(mktemp -d /tmp/brain-external.XXXXXX)
chmod 755 "$ROOT"  # the postgres user reaches its data directory below
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" || true; fi
    if [ -f "$ROOT/standby/postmaster.pid" ]; then
        runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$ROOT/standby" -m fast -w stop >/dev/null || true
    fi
    "$HERE/deploy/external-postgres.sh" stop "$ROOT/pg" || true
    rm -rf "$ROOT"
}
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PG_PORT=$(free_port)
GRPC_PORT=$(free_port)
STANDBY_PORT=$(free_port)

"$HERE/deploy/external-postgres.sh" start "$ROOT/pg" "$PG_PORT"
set -a
# shellcheck disable=SC1091
. "$ROOT/pg/env"
set +a
(umask 077 && head -c 32 /dev/urandom >"$ROOT/pepper")
export BRAIN_PEPPER_FILE=$ROOT/pepper

echo "== brain-admin migrate as brain_owner over TCP (PostgreSQL $BRAIN_EXTERNAL_PG_VERSION, pgvector $BRAIN_EXTERNAL_PGVECTOR_VERSION)"
"$VENV/bin/brain-admin" --database-url "$BRAIN_ADMIN_DATABASE_URL" migrate
"$VENV/bin/brain-admin" certs dev --out "$ROOT/tls" >/dev/null

# Empty databases for the upgrade, newer-schema and restore tests (brain_owner may not
# create databases; the superuser makes them as README "Deployment" makes brain).
SPARE=brain_spare_1,brain_spare_2,brain_spare_3
for db in ${SPARE//,/ }; do
    runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -h "$ROOT/pg/socket" -p "$PG_PORT" -U postgres -d postgres \
        -c "CREATE DATABASE $db OWNER brain_owner"
    runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -h "$ROOT/pg/socket" -p "$PG_PORT" -U postgres -d "$db" \
        -c "CREATE EXTENSION vector" \
        -c "ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF"
done

# A streaming standby of that cluster, for the read-replica test; brain_owner may pause its
# replay there (to prove which database a read came from).
echo "== a streaming replica on 127.0.0.1:$STANDBY_PORT"
runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -h "$ROOT/pg/socket" -p "$PG_PORT" -U postgres -d brain \
    -c "GRANT EXECUTE ON FUNCTION pg_wal_replay_pause(), pg_wal_replay_resume() TO brain_owner"
install -d -m 700 -o postgres "$ROOT/standby"
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_basebackup -h "$ROOT/pg/socket" -p "$PG_PORT" -U postgres \
    -D "$ROOT/standby" -R -X stream -c fast
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$ROOT/standby" -l "$ROOT/standby/server.log" -w -t 60 \
    -o "-p $STANDBY_PORT -k $ROOT/pg/socket -c listen_addresses=127.0.0.1" start >/dev/null
STANDBY_URL=${BRAIN_DATABASE_URL/:$PG_PORT\//:$STANDBY_PORT/}
STANDBY_ADMIN_URL=${BRAIN_ADMIN_DATABASE_URL/:$PG_PORT\//:$STANDBY_PORT/}

echo "== brain-server as brain_server with TLS on 127.0.0.1:$GRPC_PORT"
BRAIN_LISTEN=127.0.0.1:$GRPC_PORT BRAIN_TLS_CERT=$ROOT/tls/server.pem BRAIN_TLS_KEY=$ROOT/tls/server-key.pem \
    BRAIN_RATE_LIMIT=1000 BRAIN_RATE_BURST=1000 BRAIN_LOG_LEVEL=warning \
    "$VENV/bin/brain-server" 2>"$ROOT/server.log" &
SERVER_PID=$!
"$PY" - "127.0.0.1:$GRPC_PORT" "$ROOT/tls/ca.pem" "$SERVER_PID" <<'EOF' || { cat "$ROOT/server.log" >&2; exit 1; }
import os, sys, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

target, ca, pid = sys.argv[1], open(sys.argv[2], "rb").read(), int(sys.argv[3])
with grpc.secure_channel(target, grpc.ssl_channel_credentials(ca)) as channel:
    stub = health_pb2_grpc.HealthStub(channel)
    for _ in range(600):  # generous: the local embedder loads first on a busy machine
        os.kill(pid, 0)  # raises once brain-server has exited (it printed why)
        try:
            if stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status == 1:
                sys.exit(0)
        except grpc.RpcError:
            pass
        time.sleep(0.5)
sys.exit("brain-server did not become healthy")
EOF

echo "== tests against the deployment"
cd "$HERE"
BRAIN_TEST_ADMIN_DATABASE_URL=$BRAIN_ADMIN_DATABASE_URL BRAIN_TEST_DATABASE_URL=$BRAIN_DATABASE_URL \
    BRAIN_TEST_PEPPER_FILE=$BRAIN_PEPPER_FILE BRAIN_TEST_TARGET=127.0.0.1:$GRPC_PORT \
    BRAIN_TEST_TLS_CA=$ROOT/tls/ca.pem BRAIN_TEST_SPARE_DATABASES=$SPARE \
    BRAIN_TEST_READ_DATABASE_URL=$STANDBY_URL BRAIN_TEST_REPLICA_ADMIN_URL=$STANDBY_ADMIN_URL \
    "$PY" -m pytest -q -p no:cacheprovider -rs $TESTS "$@"
