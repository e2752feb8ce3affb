# The MCP gateway image for the docker sandbox provider: one container per rollout, the world mounted at /world, the
# gateway started over stdio with `docker exec -i CONTAINER python -m envs.mcp.gateway --world /world`.
#
#   make docker-base        # docker/build.sh: the base image, then this one from a prepared build context
#
# Built FROM the local Debian base (debootstrap; python3, venv, bubblewrap) with no network: the context holds envs/,
# gateway-requirements.txt and the wheels `pip download` fetched on the host. Only envs/ and the gateway's runtime
# libraries go in (no torch, Prefect or Ray): the image stays small and starts fast.
ARG BASE_IMAGE=rl-recipe-base:bookworm
FROM ${BASE_IMAGE}

COPY gateway-requirements.txt /tmp/gateway-requirements.txt
COPY wheels/ /tmp/wheels/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels -r /tmp/gateway-requirements.txt \
    && rm -rf /tmp/wheels /tmp/gateway-requirements.txt

WORKDIR /app
COPY envs/ /app/envs/
# `python` is the venv's; code_exec puts the interpreter's folder first on PATH as on a host.
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/app PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8

# The container idles; each sandbox runs its gateway with `docker exec -i`, so a reset never restarts the container.
CMD ["sleep", "infinity"]
