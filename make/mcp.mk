# Real third-party MCP servers from the registries and verifiers, for the bring-your-own-environment examples and
# tests (docs/environments.md). Each PyPI server gets a venv of its own under .venv-mcp/ (servers pin MCP SDKs that do not
# agree with each other or with ours); the npm one installs under .mcp-npm/. rl-recipe finds their commands there
# without PATH changes (envs/byo/build.py: SERVER_FOLDERS).
MCP_VENVS := .venv-mcp
MCP_NPM := .mcp-npm
MCP_STAMP := $(MCP_VENVS)/.installed
MCP_GIT_PIN := mcp-server-git==2026.10.19
# 2025.4.25 is written against the MCP SDK 1.x server API: with the 2.x SDK pip resolves it exits at start
# (AttributeError: 'Server' object has no attribute 'list_resources'), so its venv keeps the 1.x SDK.
MCP_SQLITE_PIN := mcp-server-sqlite==2025.4.25 "mcp<2"
MCP_FILESYSTEM_PIN := @modelcontextprotocol/server-filesystem@2026.8.31
# Prime Intellect's verifiers (0.4: verifiers.v1) pins mcp==2.0.0, so it too runs in a venv of its own
# (envs/byo/verifiers_bridge.py is run by its Python).
VERIFIERS_PIN := verifiers==0.4.0

.PHONY: install-mcp-servers

$(MCP_STAMP): make/mcp.mk
	@test -x $(MCP_VENVS)/git/bin/python || $(PYTHON) -m venv $(MCP_VENVS)/git
	$(MCP_VENVS)/git/bin/pip install -q $(MCP_GIT_PIN)
	@test -x $(MCP_VENVS)/sqlite/bin/python || $(PYTHON) -m venv $(MCP_VENVS)/sqlite
	$(MCP_VENVS)/sqlite/bin/pip install -q $(MCP_SQLITE_PIN)
	@test -x $(MCP_VENVS)/verifiers/bin/python || $(PYTHON) -m venv $(MCP_VENVS)/verifiers
	$(MCP_VENVS)/verifiers/bin/pip install -q $(VERIFIERS_PIN)
	@command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq npm >/dev/null)
	npm install -s --prefix $(MCP_NPM) --no-audit --no-fund $(MCP_FILESYSTEM_PIN)
	@touch $@

install-mcp-servers: $(MCP_STAMP)
