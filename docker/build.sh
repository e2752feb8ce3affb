#!/usr/bin/env bash
# Build the docker sandbox images on a daemon with no registry and no container network (`make docker-base`):
#
#   1. rl-recipe-base:bookworm  - `debootstrap --variant=minbase bookworm` from the Debian mirror apt uses, with python3,
#      python3-venv, bubblewrap and ca-certificates, imported with `docker import` (Harbor task images build FROM it);
#   2. rl-recipe-gateway:latest - docker/gateway.Dockerfile FROM it: the gateway's wheels are downloaded on the host
#      (`pip download`, pinned by requirements.lock) into the build context, so the build runs with `--network none`.
#
# An existing base image is kept (REBUILD=1 redoes it); the gateway image is rebuilt from the layer cache every time, so
# it always holds this checkout's envs/. Timings go to stdout.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BASE_IMAGE=${BASE_IMAGE:-rl-recipe-base:bookworm}
GATEWAY_IMAGE=${GATEWAY_IMAGE:-rl-recipe-gateway:latest}
CACHE=${RL_RECIPE_DOCKER_CACHE:-/var/cache/rl-recipe-docker}
PIP=${PIP:-$REPO/.venv/bin/python -m pip}
# The first deb URI apt is configured with (deb822 or one-line sources), e.g. http://deb.debian.org/debian.
MIRROR=${DEBIAN_MIRROR:-$( (grep -rhoE '^(URIs:|deb) +[a-z]+://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
    /etc/apt/sources.list.d/ 2>/dev/null || true) | head -1 | awk '{print $2}')}
export DOCKER_BUILDKIT=0  # the classic builder: no buildx plugin here, and `--network none` applies to every RUN

has_image() { docker image inspect "$1" >/dev/null 2>&1; }
elapsed() { echo "$1: $(($(date +%s) - $2)) s"; }
# Run a command with its output in LOG, shown only when it fails.
quiet() {
    local log=$1
    shift
    "$@" >"$log" 2>&1 || { tail -40 "$log" >&2; echo "failed: $* (log: $log)" >&2; return 1; }
}

if [ -n "${REBUILD:-}" ] || ! has_image "$BASE_IMAGE"; then
    started=$(date +%s)
    command -v debootstrap >/dev/null || (apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null)
    rootfs="$CACHE/rootfs"
    rm -rf "$rootfs" && mkdir -p "$CACHE"
    debootstrap --variant=minbase --include=python3,python3-venv,bubblewrap,ca-certificates \
        bookworm "$rootfs" "${MIRROR:?no Debian mirror found in /etc/apt; set DEBIAN_MIRROR}" >"$CACHE/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
    elapsed "base image $BASE_IMAGE (debootstrap from $MIRROR + import)" "$started"
fi

# Always built: envs/ goes in last, so the layer cache keeps the installed wheels and only a changed envs/ is redone.
started=$(date +%s)
context="$CACHE/gateway-context"
rm -rf "$context" && mkdir -p "$context/wheels"
cp "$REPO/docker/gateway-requirements.txt" "$context/"
tar -C "$REPO" --exclude=__pycache__ -c envs | tar -C "$context" -x
quiet "$CACHE/gateway-wheels.log" $PIP download --only-binary=:all: -c "$REPO/requirements.lock" -d "$context/wheels" \
    -r "$REPO/docker/gateway-requirements.txt"
quiet "$CACHE/gateway-build.log" docker build --network none ${REBUILD:+--no-cache} --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$GATEWAY_IMAGE" -f "$REPO/docker/gateway.Dockerfile" "$context"
rm -rf "$context"
elapsed "gateway image $GATEWAY_IMAGE" "$started"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -e "^${BASE_IMAGE%%:*}:" -e "^${GATEWAY_IMAGE%%:*}:"
