#!/usr/bin/env bash
# make image: build deploy/Dockerfile from the repository root with buildah or docker.
#
#   BASE_IMAGE         base of both stages (default python:3.11-slim; any image with
#                      Python >= 3.11 as python3 and its venv module)
#   IMAGE              tag of the result (default shared-brain:<version in pyproject.toml>)
#   IMAGE_TOOL         buildah or docker (default: buildah when installed, else docker)
#   BUILDAH_ISOLATION  buildah's isolation, e.g. chroot where its OCI runtime cannot start
#
# buildah writes the Docker image format, which keeps the HEALTHCHECK (the OCI format drops
# it). Extra arguments go to the build tool. Every failure ends with one `make image:` line.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'make image: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

BASE_IMAGE=${BASE_IMAGE-python:3.11-slim}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$HERE/pyproject.toml" | head -n 1)
IMAGE=${IMAGE:-shared-brain:${VERSION:-latest}}

# A reference as docker and buildah accept it: [registry[:port]/]path[:tag][@digest].
ref='^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$'
[ -n "$BASE_IMAGE" ] || die "BASE_IMAGE is empty; give an image with Python >= 3.11, e.g. BASE_IMAGE=python:3.11-slim"
[[ $BASE_IMAGE =~ $ref ]] || die "BASE_IMAGE='$BASE_IMAGE' is not an image reference (e.g. python:3.11-slim or localhost/base:tag)"
[[ $IMAGE =~ $ref ]] || die "IMAGE='$IMAGE' is not an image reference (e.g. shared-brain:0.1.0)"

TOOL=${IMAGE_TOOL:-}
if [ -z "$TOOL" ]; then
    if command -v buildah >/dev/null 2>&1; then TOOL=buildah
    elif command -v docker >/dev/null 2>&1; then TOOL=docker
    else die "neither buildah nor docker is installed (Debian: apt-get install buildah)"
    fi
fi
case $TOOL in
buildah | docker) command -v "$TOOL" >/dev/null 2>&1 || die "IMAGE_TOOL=$TOOL is not installed" ;;
*) die "IMAGE_TOOL='$TOOL' is not buildah or docker" ;;
esac
if [ "$TOOL" = docker ] && ! docker info >/dev/null 2>&1; then
    die "docker is installed but its daemon does not answer (docker info fails); start it or install buildah"
fi

cd "$HERE"
cmd=("$TOOL")
if [ "$TOOL" = buildah ]; then
    cmd+=(bud --format docker --ignorefile deploy/Dockerfile.dockerignore)
    [ -z "${BUILDAH_ISOLATION:-}" ] || cmd+=(--isolation "$BUILDAH_ISOLATION")
else
    cmd+=(build)  # BuildKit reads deploy/Dockerfile.dockerignore by itself
fi
cmd+=(--build-arg "BASE_IMAGE=$BASE_IMAGE" -f deploy/Dockerfile -t "$IMAGE" "$@" .)
say "${cmd[*]}"
LOG=$(mktemp /tmp/brain-image-build.XXXXXX)
trap 'rm -f "$LOG"' EXIT
status=0
"${cmd[@]}" 2>&1 | tee "$LOG" || status=$?
if [ "$status" -ne 0 ]; then
    # The tool said why above; name it in one line.
    if grep -q '^deploy/Dockerfile: ' "$LOG"; then  # the Dockerfile's own check of the base
        why=$(grep -m 1 '^deploy/Dockerfile: ' "$LOG")
    elif [ "$TOOL" = buildah ] && [ -z "${BUILDAH_ISOLATION:-}" ] && grep -q 'creating container' "$LOG"; then
        why="its OCI runtime cannot start build containers on this machine; try BUILDAH_ISOLATION=chroot"
    else  # the tool's last error line, a failed step's command shortened
        why=$(grep -E '^(Error|error|ERROR)' "$LOG" | tail -n 1 \
            | sed -E 's/^Error: building at STEP "(.{0,50}).*": (.*)$/step "\1..." failed: \2/' || true)
    fi
    die "$TOOL could not build $IMAGE on BASE_IMAGE=$BASE_IMAGE${why:+: $why}"
fi
say "built $IMAGE on BASE_IMAGE=$BASE_IMAGE with $TOOL"
