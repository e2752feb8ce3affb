#!/usr/bin/env bash
# Start a Docker daemon for the docker sandbox provider unless one already answers at $DOCKER_HOST.
#
# The daemon runs as root with no bridge and no iptables rules: every container runs with networking off (the MCP
# gateway speaks over `docker exec -i` stdio), so nothing but loopback is ever configured. Its data root, socket, pid
# file and log sit at fixed places (overridable) so a second `make` finds and reuses it.
#
#   docker/dockerd.sh      # prints the DOCKER_HOST that answers
set -euo pipefail

SOCKET=${RL_RECIPE_DOCKER_SOCKET:-/var/run/docker.sock}
DATA_ROOT=${RL_RECIPE_DOCKER_DATA_ROOT:-/var/lib/rl-recipe-docker}
LOG=${RL_RECIPE_DOCKER_LOG:-/var/log/rl-recipe-dockerd.log}
PIDFILE=${RL_RECIPE_DOCKER_PIDFILE:-/var/run/rl-recipe-dockerd.pid}
export DOCKER_HOST=${DOCKER_HOST:-unix://$SOCKET}

if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    echo "$DOCKER_HOST"
    exit 0
fi
if ! command -v dockerd >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if [ "$(id -u)" != 0 ]; then
    echo "no Docker daemon answers at $DOCKER_HOST and starting one needs root" >&2
    exit 1
fi
mkdir -p "$DATA_ROOT" "$(dirname "$LOG")"
setsid dockerd --bridge=none --iptables=false --ip6tables=false --data-root "$DATA_ROOT" --host "unix://$SOCKET" \
    --pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null &
for _ in $(seq 60); do
    if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        echo "$DOCKER_HOST"
        exit 0
    fi
    sleep 0.5
done
echo "dockerd did not answer at $DOCKER_HOST within 30 s; see $LOG" >&2
exit 1
