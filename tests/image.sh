#!/usr/bin/env bash
# make test-image: deploy/Dockerfile built and run on this machine, without a registry.
#
# 1. A Debian 12 root file system made by mmdebstrap (python3 + python3-venv: what the
#    Dockerfile takes from its base), imported with `podman import` as a local base image
#    (kept in podman's storage under a tag naming its recipe, so later runs reuse it).
# 2. `make image` with that base: `buildah bud --isolation chroot --build-arg BASE_IMAGE=...`.
# 3. The built image mounted read-only (`podman image mount`) and its ENTRYPOINT started under
#    chroot as the image's USER with its ENV and WORKDIR, on the host's loopback network,
#    in a private mount namespace holding /dev, /proc, /sys and writable /tmp and data dir
#    (what a container runtime adds). `podman run` is not used: crun refuses to start
#    containers here ("cgroups in hybrid mode not supported").
# 4. Run A: the embedded PostgreSQL inside the image, as the non-root user. Run B: an external
#    PostgreSQL 15 (deploy/external-postgres.sh, as tests/external.sh), migrated by the image's
#    brain-admin as the owner, brain-server as the confined role over TLS. Each: the image's
#    HEALTHCHECK command answers, then tests/smoke.py runs with the image's python.
#    Also: a missing external database stops the image's brain-server with one line.
#
# Needs root (apt-get, mounts, chroot). Everything else lives in one temporary folder,
# removed on exit with the mounts and processes, also on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${TEST_IMAGE:-localhost/shared-brain:test-image}
PACKAGES=(mmdebstrap podman buildah)
# The base: Debian's minbase (what debian:bookworm-slim holds) plus what python:3.11-slim
# adds and what the Dockerfile needs of Python: python3 with venv/ensurepip.
BASE_PACKAGES=python3,python3-venv,ca-certificates,netbase,tzdata

say() { printf '== %s\n' "$*"; }
die() { printf 'make test-image: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get, mount, chroot)"
[ -f "$HERE/tests/smoke.py" ] || die "tests/smoke.py is missing"
missing=$(dpkg-query -W -f='${db:Status-Status} ${Package}\n' "${PACKAGES[@]}" 2>&1 | grep -v '^installed ' || true)
if [ -n "$missing" ]; then
    say "installing ${PACKAGES[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
fi

ROOT=$(mktemp -d /tmp/brain-image.XXXXXX)
chmod 755 "$ROOT"  # the postgres user reaches its data directory (run B)
MNT=""
SERVER_PID=""
stop_server() {  # SIGTERM, then SIGKILL after 30 s (docker stop waits 10 s; the drain is 10 s)
    [ -n "$SERVER_PID" ] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
image_processes() {  # pids of processes whose root is the image's file system
    [ -n "$MNT" ] || return 0
    local link pid
    for link in /proc/[0-9]*/root; do
        [ "$(readlink "$link" 2>/dev/null)" = "$MNT" ] || continue
        pid=${link#/proc/}
        echo "${pid%/root}"
    done
}
kill_image_processes() {  # anything still running from the image, by pid
    local pid
    for pid in $(image_processes); do kill -KILL "$pid" 2>/dev/null || true; done
}
cleanup() {
    local status=$?
    stop_server
    kill_image_processes
    [ -z "$MNT" ] || podman image unmount "$IMAGE" >/dev/null 2>&1 || true
    [ ! -d "$ROOT/pg" ] || "$HERE/deploy/external-postgres.sh" stop "$ROOT/pg" || true
    rm -rf "$ROOT"
    [ "$status" -eq 0 ] || printf 'make test-image: failed (exit %s); see the lines above\n' "$status" >&2
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- 1. the local Debian base ------------------------------------------------------------
# pip inside the build reaches PyPI through this site's TLS-inspecting egress, whose CA the
# host trusts: the base gets the host's extra CAs (as a site's own base image would) and
# PIP_CERT, so pip uses the system store. The host's pip.conf (local wheel folders) stays out.
HOST_CAS=(/usr/local/share/ca-certificates/*.crt)
[ -e "${HOST_CAS[0]}" ] || HOST_CAS=()
recipe=$({
    echo "bookworm minbase $BASE_PACKAGES"
    cat /etc/apt/sources.list.d/debian.sources 2>/dev/null || true
    [ ${#HOST_CAS[@]} -eq 0 ] || cat "${HOST_CAS[@]}"
} | sha256sum | cut -c1-12)
BASE=localhost/shared-brain-base:bookworm-$recipe
if podman image exists "$BASE"; then
    say "base image $BASE (cached in podman's storage)"
else
    say "mmdebstrap: Debian bookworm minbase + $BASE_PACKAGES -> $BASE"
    mirror=()
    [ ! -f /etc/apt/sources.list.d/debian.sources ] || mirror=(/etc/apt/sources.list.d/debian.sources)
    hooks=()
    if [ ${#HOST_CAS[@]} -gt 0 ]; then
        cp "${HOST_CAS[@]}" "$ROOT/"
        # shellcheck disable=SC2016  # $1 is mmdebstrap's root, expanded by its hook shell
        hooks=(--customize-hook="cp $ROOT/*.crt \"\$1/usr/local/share/ca-certificates/\""
            --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1')
    fi
    mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" "${hooks[@]}" \
        bookworm "$ROOT/rootfs.tar" "${mirror[@]}"
    podman import --quiet --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["/bin/bash"]' "$ROOT/rootfs.tar" "$BASE" >/dev/null
    rm -f "$ROOT/rootfs.tar" "$ROOT"/*.crt
fi

# --- 2. the image, built as `make image` builds it ----------------------------------------
say "make image BASE_IMAGE=$BASE (buildah, chroot isolation)"
previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
BASE_IMAGE=$BASE IMAGE=$IMAGE IMAGE_TOOL=buildah BUILDAH_ISOLATION=chroot \
    "$HERE/deploy/build-image.sh" --quiet
# One image is kept for a look afterwards (podman image mount); the last run's goes.
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
fi

# --- 3. the image's file system and configuration ------------------------------------------
MNT=$(podman image mount "$IMAGE")
eval "$(podman image inspect "$IMAGE" | python3 -c '
import json, shlex, sys
image = json.load(sys.stdin)[0]
config = image.get("Config") or {}
health = (image.get("Healthcheck") or {}).get("Test") or []
if health[:1] != ["CMD"]:
    sys.exit("make test-image: the image has no exec-form HEALTHCHECK: %s" % health)
arrays = {"IMAGE_ENV": config.get("Env") or [], "ENTRYPOINT": config.get("Entrypoint") or [],
          "HEALTHCHECK": health[1:]}
for name, values in arrays.items():
    print("%s=(%s)" % (name, " ".join(shlex.quote(v) for v in values)))
print("IMAGE_USER=" + shlex.quote(config.get("User") or "0:0"))
print("WORKDIR=" + shlex.quote(config.get("WorkingDir") or "/"))
')"
DATA_DIR=/var/lib/brain
for kv in "${IMAGE_ENV[@]}"; do [[ $kv != BRAIN_DATA_DIR=* ]] || DATA_DIR=${kv#BRAIN_DATA_DIR=}; done
uid=${IMAGE_USER%%:*}
case $uid in 0 | root) die "the image runs as root (USER $IMAGE_USER); it must not" ;; esac
HOME_DIR=$(awk -F: -v u="$uid" '$3 == u {print $6}' "$MNT/etc/passwd")
say "image $IMAGE: USER $IMAGE_USER, WORKDIR $WORKDIR, ENTRYPOINT ${ENTRYPOINT[*]}, HEALTHCHECK ${HEALTHCHECK[*]}"

# in_image DATA [NAME=VALUE...] COMMAND...: run COMMAND from the image as its user, with its
# ENV (then the given variables), in its WORKDIR; DATA is the host folder mounted at the data
# directory, $ROOT/tmp is /tmp. The mounts live in a private namespace and end with it.
mkdir -p "$ROOT/tmp" && chmod 1777 "$ROOT/tmp"
# shellcheck disable=SC2016  # expanded by the inner shell
ENTER='
set -eu
root=$1 data=$2 tmp=$3 datadir=$4 user=$5 workdir=$6
shift 6
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --bind "$tmp" "$root/tmp"
mount --bind "$data" "$root$datadir"
for f in /etc/hosts /etc/resolv.conf; do [ ! -f "$root$f" ] || mount --bind "$f" "$root$f"; done
exec chroot --userspec="$user" "$root" /usr/bin/env -i -C "$workdir" "$@"
'
image_command() {  # IMAGE_COMMAND=(the command line in_image runs)
    local data=$1
    shift
    IMAGE_COMMAND=(unshare --mount --propagation private -- bash -c "$ENTER" in_image
        "$MNT" "$data" "$ROOT/tmp" "$DATA_DIR" "$IMAGE_USER" "$WORKDIR"
        "${IMAGE_ENV[@]}" HOME="$HOME_DIR" HOSTNAME=shared-brain "$@")
}
in_image() {
    image_command "$@"
    "${IMAGE_COMMAND[@]}"
}
# start_server DATA [NAME=VALUE...]: the ENTRYPOINT in the background; SERVER_PID is its pid
# (unshare, bash, chroot and env each exec the next), so SIGTERM reaches brain-server itself.
start_server() {
    image_command "$@" "${ENTRYPOINT[@]}"
    (exec "${IMAGE_COMMAND[@]}") >"$ROOT/server.log" 2>&1 &
    SERVER_PID=$!
}
# stop_checked: SIGTERM as `docker stop` sends; nothing of the image may outlive brain-server
# (its embedded PostgreSQL included).
stop_checked() {
    local left
    stop_server
    sleep 1
    left=$(image_processes)
    [ -z "$left" ] || die "still running from the image after brain-server stopped: $left"
}
new_data() { install -d -m 700 -o "$uid" -g "${IMAGE_USER#*:}" "$ROOT/$1" && echo "$ROOT/$1"; }

# wait_healthy DATA [NAME=VALUE...]: the image's HEALTHCHECK command, run as the container
# runtime would (inside the image, its user and ENV), until it answers; prints its answer.
wait_healthy() {
    local data=$1 answer
    shift
    for _ in $(seq 1 300); do
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$ROOT/server.log" >&2; die "brain-server exited"; }
        if answer=$(in_image "$data" "$@" "${HEALTHCHECK[@]}" 2>&1); then
            echo "   $answer"
            return 0
        fi
        sleep 1
    done
    cat "$ROOT/server.log" >&2
    die "the image's health check never answered: $answer"
}

SMOKE_ARGS=(--bin-dir /opt/brain/bin)
install -m 644 "$HERE/tests/smoke.py" "$ROOT/tmp/smoke.py"
smoke() {  # smoke DATA TARGET KEY [ARG...]: tests/smoke.py with the image's python
    local data=$1 target=$2 key=$3
    shift 3
    in_image "$data" python /tmp/smoke.py --target "$target" --key-file "$key" "${SMOKE_ARGS[@]}" "$@"
}

# --- run A: embedded PostgreSQL inside the image -------------------------------------------
DATA_A=$(new_data data-a)
PORT_A=$(free_port)
say "run A: ${ENTRYPOINT[*]} with the embedded PostgreSQL as uid $uid on 127.0.0.1:$PORT_A"
started=$SECONDS
start_server "$DATA_A" BRAIN_LISTEN="127.0.0.1:$PORT_A" BRAIN_DEV_KEY_FILE="$DATA_DIR/dev-key"
wait_healthy "$DATA_A" BRAIN_LISTEN="127.0.0.1:$PORT_A"
say "healthy after $((SECONDS - started)) s; smoke run with the dev key the server wrote"
[ -s "$DATA_A/dev-key" ] || die "brain-server wrote no dev key in $DATA_DIR/dev-key"
pg_version=$(find "$DATA_A" -name PG_VERSION -print -quit)
[ -n "$pg_version" ] || die "no embedded cluster under $DATA_DIR"
owner=$(stat -c %u "$pg_version")
[ "$owner" = "$uid" ] || die "the embedded cluster's files belong to uid $owner, not the image's $uid"
smoke "$DATA_A" "127.0.0.1:$PORT_A" "$DATA_DIR/dev-key"
stop_checked
say "run A passed"

# --- a missing external database: one line, no traceback -----------------------------------
(umask 077 && head -c 32 /dev/urandom >"$ROOT/tmp/pepper")
chown "$IMAGE_USER" "$ROOT/tmp/pepper"
DATA_X=$(new_data data-x)
CLOSED=$(free_port)
say "a missing external database (127.0.0.1:$CLOSED, nothing listening)"
status=0
in_image "$DATA_X" BRAIN_LISTEN="127.0.0.1:$(free_port)" BRAIN_PEPPER_FILE=/tmp/pepper \
    BRAIN_DATABASE_URL="postgresql://brain_server:secret@127.0.0.1:$CLOSED/brain" \
    "${ENTRYPOINT[@]}" >"$ROOT/missing.log" 2>&1 || status=$?
sed 's/^/   /' "$ROOT/missing.log"
[ "$status" -ne 0 ] || die "brain-server started without its database"
! grep -q Traceback "$ROOT/missing.log" || die "a missing database printed a traceback"
[ "$(grep -c . "$ROOT/missing.log")" -eq 1 ] || die "a missing database printed more than one line"

# --- run B: external PostgreSQL given by environment ---------------------------------------
PG_PORT=$(free_port)
PORT_B=$(free_port)
"$HERE/deploy/external-postgres.sh" start "$ROOT/pg" "$PG_PORT"
set -a
# shellcheck disable=SC1091
. "$ROOT/pg/env"
set +a
DATA_B=$(new_data data-b)
say "run B: the image's brain-admin migrate as brain_owner (PostgreSQL $BRAIN_EXTERNAL_PG_VERSION, pgvector $BRAIN_EXTERNAL_PGVECTOR_VERSION)"
admin() { in_image "$DATA_B" BRAIN_PEPPER_FILE=/tmp/pepper brain-admin --database-url "$BRAIN_ADMIN_DATABASE_URL" "$@"; }
admin migrate
in_image "$DATA_B" brain-admin certs dev --out /tmp/tls >/dev/null
admin tenants create smoke >/dev/null
perms=$(in_image "$DATA_B" python -c 'from brain.authz import ALL_PERMISSIONS; print(",".join(sorted(ALL_PERMISSIONS)))')
admin keys create --tenant smoke --principal smoke --permissions "$perms" --json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])' >"$ROOT/tmp/key-b"
chown "$IMAGE_USER" "$ROOT/tmp/key-b" && chmod 600 "$ROOT/tmp/key-b"
say "run B: ${ENTRYPOINT[*]} as brain_server over TLS on 127.0.0.1:$PORT_B"
started=$SECONDS
start_server "$DATA_B" BRAIN_LISTEN="127.0.0.1:$PORT_B" BRAIN_DATABASE_URL="$BRAIN_DATABASE_URL" \
    BRAIN_PEPPER_FILE=/tmp/pepper BRAIN_TLS_CERT=/tmp/tls/server.pem BRAIN_TLS_KEY=/tmp/tls/server-key.pem
wait_healthy "$DATA_B" BRAIN_LISTEN="127.0.0.1:$PORT_B" BRAIN_TLS_CERT=/tmp/tls/server.pem \
    BRAIN_HEALTH_TLS_CA=/tmp/tls/ca.pem
say "healthy after $((SECONDS - started)) s; smoke run with a key minted by the image's brain-admin"
smoke "$DATA_B" "127.0.0.1:$PORT_B" /tmp/key-b --tls-ca /tmp/tls/ca.pem
stop_checked
say "run B passed"
say "make test-image passed: $IMAGE on $BASE"
