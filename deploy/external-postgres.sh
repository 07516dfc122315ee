#!/usr/bin/env bash
# The PostgreSQL half of a team deployment, as a recipe an operator can read top to bottom:
#
#   1. PostgreSQL 15 and its server headers from Debian's packages;
#   2. pgvector built from Debian's *source* package with PGXS (Debian ships no pgvector
#      binary for PostgreSQL 15, and bookworm has no pgvector source either: the source
#      package comes from trixie, 0.8.0 when this was written);
#   3. a cluster initialised and run by the unprivileged `postgres` system user (PostgreSQL
#      refuses to run as root), password (SCRAM) logins over TCP on 127.0.0.1;
#   4. the roles and database exactly as docs/operations/deployment.md says.
#
# It changes the host it runs on, and is meant for a lab or test machine (make test-external,
# make test-image run it), not for a database host you care about:
#   - when any of postgresql-$PG_MAJOR, its server headers, dpkg-dev, gcc or make is missing,
#     `apt-get update` and `apt-get install` of all of them: a PostgreSQL already installed
#     is upgraded to Debian's newest point release (15.18 became 15.20 on one host);
#   - it may add /etc/apt/sources.list.d/brain-deb-src.sources (deb-src lines for bookworm
#     and trixie) and leaves it there, with apt's lists updated;
#   - pgvector's source and build in /var/cache/brain-pgvector, and `make install` of it
#     into that PostgreSQL's extension and library folders;
#   - a `postgres` system user if there is none; the cluster, its passwords and DIR/env
#     under DIR. `stop` stops the cluster only: it undoes none of the above.
#
# Usage (as root, on Debian 12):
#   deploy/external-postgres.sh start DIR [PORT]   # idempotent; writes DIR/env (0600)
#   deploy/external-postgres.sh stop DIR
# DIR/env holds BRAIN_ADMIN_DATABASE_URL (brain_owner) and BRAIN_DATABASE_URL (brain_server).
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_USER=${PG_USER:-postgres}
PGVECTOR_BUILD=${PGVECTOR_BUILD:-/var/cache/brain-pgvector}
SOURCES=/etc/apt/sources.list.d/brain-deb-src.sources

say() { printf 'external-postgres: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
as_pg() { runuser -u "$PG_USER" -- "$@"; }

install_packages() {
    local wanted=("postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" dpkg-dev gcc make)
    local missing
    missing=$(dpkg-query -W -f='${db:Status-Status} ${Package}\n' "${wanted[@]}" 2>&1 | grep -v '^installed ' || true)
    [ -n "$missing" ] || return 0
    say "installing ${wanted[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${wanted[@]}"
}

ensure_source_lines() {
    if apt-cache showsrc pgvector >/dev/null 2>&1 && [ -n "$(apt-cache showsrc pgvector 2>/dev/null)" ]; then
        return
    fi
    say "adding deb-src lines ($SOURCES): bookworm has no pgvector source, trixie has"
    cat >"$SOURCES" <<'EOF'
# Added by Shared Brain deploy/external-postgres.sh: Debian source packages (pgvector).
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
}

build_pgvector() {
    local pg_config=$PG_BIN/pg_config sharedir
    sharedir=$("$pg_config" --sharedir)
    if [ -f "$sharedir/extension/vector.control" ] && [ -f "$("$pg_config" --pkglibdir)/vector.so" ]; then
        say "pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$sharedir/extension/vector.control") already installed for PostgreSQL $PG_MAJOR"
        return
    fi
    ensure_source_lines
    mkdir -p "$PGVECTOR_BUILD"
    chown _apt "$PGVECTOR_BUILD" 2>/dev/null || true  # apt downloads sources as _apt
    (cd "$PGVECTOR_BUILD" && apt-get source -qq pgvector)
    local src
    src=$(find "$PGVECTOR_BUILD" -maxdepth 1 -type d -name 'pgvector-*' | sort -V | tail -n 1)
    [ -n "$src" ] || die "apt-get source pgvector unpacked nothing in $PGVECTOR_BUILD"
    say "building $(basename "$src") with PGXS against $("$pg_config" --version)"
    # OPTFLAGS= as Debian's own packaging does: no -march=native, the .so runs on any x86-64.
    make -s -C "$src" PG_CONFIG="$pg_config" OPTFLAGS=""
    make -s -C "$src" PG_CONFIG="$pg_config" OPTFLAGS="" install
}

psql_super() {  # peer login as the postgres OS user over the private socket
    as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$PORT" -U postgres "$@"
}

secret() {  # a password kept beside the cluster, readable by root only
    local file=$SECRETS/$1
    [ -s "$file" ] || (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$file")
    cat "$file"
}

start() {
    [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and switches to the $PG_USER user)"
    install_packages
    build_pgvector
    id "$PG_USER" >/dev/null 2>&1 || useradd --system --user-group --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$PG_USER"

    mkdir -p "$DIR" "$SECRETS" "$SOCKET_DIR"
    chmod 755 "$DIR"  # the postgres user must reach its data directory
    as_pg test -x "$DIR" || die "user $PG_USER cannot reach $DIR: make its parent folders searchable"
    chmod 700 "$SECRETS"
    chown "$PG_USER" "$SOCKET_DIR" && chmod 700 "$SOCKET_DIR"
    if [ ! -f "$DATA/PG_VERSION" ]; then
        mkdir -p "$DATA" && chown "$PG_USER" "$DATA" && chmod 700 "$DATA"
        as_pg "$PG_BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C \
            --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    fi
    if ! as_pg "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
            -o "-p $PORT -k $SOCKET_DIR -c listen_addresses=127.0.0.1" start >/dev/null
    fi

    local owner_pw server_pw
    owner_pw=$(secret brain_owner)
    server_pw=$(secret brain_server)
    # docs/operations/deployment.md, statement for statement (guarded so a second run
    # changes nothing).
    psql_super -d postgres -v owner_pw="$owner_pw" -v server_pw="$server_pw" <<'SQL'
SELECT NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'brain_owner') AS need_owner,
       NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'brain_app') AS need_app,
       NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'brain_server') AS need_server,
       NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'brain') AS need_db \gset
\if :need_owner
CREATE ROLE brain_owner LOGIN PASSWORD :'owner_pw';
\endif
\if :need_app
CREATE ROLE brain_app NOLOGIN;
\endif
\if :need_server
CREATE ROLE brain_server LOGIN PASSWORD :'server_pw' IN ROLE brain_app NOBYPASSRLS;
\endif
\if :need_db
CREATE DATABASE brain OWNER brain_owner;
\endif
SQL
    psql_super -d brain -c "SET client_min_messages TO warning; CREATE EXTENSION IF NOT EXISTS vector"
    # Text match may then run before the row-level security policies, through the GIN
    # indexes (docs/concepts/retrieval.md, How search scales with the bucket); only a
    # superuser may mark it.
    psql_super -d brain -c "ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF"

    local url=postgresql://%s:%s@127.0.0.1:$PORT/brain
    (
        umask 077
        # shellcheck disable=SC2059
        {
            printf "BRAIN_ADMIN_DATABASE_URL=$url\n" brain_owner "$owner_pw"
            printf "BRAIN_DATABASE_URL=$url\n" brain_server "$server_pw"
            printf "BRAIN_EXTERNAL_PG_VERSION='%s'\n" "$(psql_super -d brain -tAc 'SHOW server_version')"
            printf "BRAIN_EXTERNAL_PGVECTOR_VERSION=%s\n" \
                "$(psql_super -d brain -tAc "SELECT extversion FROM pg_extension WHERE extname = 'vector'")"
        } >"$DIR/env"
    )
    say "PostgreSQL $PG_MAJOR serving on 127.0.0.1:$PORT (data $DATA); URLs in $DIR/env"
}

stop() {
    if [ -f "$DATA/postmaster.pid" ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null || true
    fi
}

[ $# -ge 2 ] || die "usage: $0 start DIR [PORT] | stop DIR"
ACTION=$1
DIR=$(realpath -m "$2")
PORT=${3:-5432}
DATA=$DIR/data
SECRETS=$DIR/secrets
SOCKET_DIR=$DIR/socket
case $ACTION in
start) start ;;
stop) stop ;;
*) die "usage: $0 start DIR [PORT] | stop DIR" ;;
esac
