# `make bench-trl`: our RL loop next to TRL's GRPOTrainer on the same base, tasks, tools and budget
# (benchmarks/vs_trl.py). Included from the Makefile; it reuses VENV, PYTHON and STAMP from there.
# TRL lives in a venv of its own (it brings accelerate and datasets) layered on the main one: a .pth line makes the
# main venv's packages (torch, transformers, this project) importable, so both sides run the very same versions.
TRL_VENV := .venv-trl
TRL_PY := $(TRL_VENV)/bin/python
TRL_PIN := trl==1.16.0
TRL_STAMP := $(TRL_VENV)/.installed

.PHONY: install-trl bench-trl

$(TRL_STAMP): make/trl.mk $(STAMP)
	@test -x $(TRL_PY) || $(PYTHON) -m venv $(TRL_VENV)
	@site=$$($(VENV)/bin/python -c "import site; print(site.getsitepackages()[0])") && \
		echo "import site; site.addsitedir('$$(realpath $$site)')" > \
		$$($(TRL_PY) -c "import site; print(site.getsitepackages()[0])")/rl-recipe-main.pth
	$(TRL_PY) -m pip install -q "$(TRL_PIN)"
	@# the layering holds only if pip took torch and transformers from the main venv instead of installing its own
	$(TRL_PY) -c "import torch, transformers, trl, envs; print('trl', trl.__version__, 'on torch', torch.__version__)"
	@touch $(TRL_STAMP)

install-trl: $(TRL_STAMP)

bench-trl: install install-trl
	$(TRL_PY) benchmarks/vs_trl.py
