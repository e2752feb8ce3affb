# The MCP gateway image for the docker sandbox provider: one container per rollout, the world mounted at /world, the
# gateway started over stdio with `docker exec -i CONTAINER python -m envs.mcp.gateway --world /world`.
#
#   docker build -f docker/gateway.Dockerfile -t rl-recipe-gateway:latest .
#
# Only envs/ and the gateway's runtime libraries go in (no torch, Prefect or Ray): the image stays small and starts fast.
FROM python:3.11-slim

# bubblewrap isolates code_exec inside the container as on a host (envs/sandbox/limits.py); bash for run_bash.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap bash \
    && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir \
    "mcp>=2.3" "pydantic>=2.7" "openpyxl>=3.1" "pycel>=1.0b30" "python-docx>=1.1" "python-pptx>=1.0" \
    "pdfplumber>=0.11" "numpy>=1.26" "pandas>=2.0"

WORKDIR /app
COPY envs/ /app/envs/
ENV PYTHONPATH=/app PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

# The container idles; each sandbox runs its gateway with `docker exec -i`, so a reset never restarts the container.
CMD ["sleep", "infinity"]
