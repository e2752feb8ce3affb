"""Our tiny engine behind the engines' gate (``trainer.vllm.gate``), as the run's fleet starts an engine: shared by
the tests that knock on its routes with and without the run's token."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envs.net import free_port
from envs.tokens import ensure_token_file
from trainer.model import bootstrap_policy, save_policy
from trainer.specs import TinyModelSpec
from trainer.vllm.launch import VllmServeSpec
from trainer.vllm.server import VllmServer

CORPUS = [f"file {i}: the memo says {i * 11 % 70} pages about client {i % 13}" for i in range(200)]
SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=128)


@contextmanager
def gated_engine(root: Path) -> Iterator[tuple[str, str]]:
    """A tiny policy served as ``policy`` behind the gate, its token in ``root/engines/token``: (base URL, token)."""
    policy = save_policy(*bootstrap_policy(CORPUS, SPEC, vocab_size=300), root / "policy")
    token = ensure_token_file(root / "engines" / "token")
    argv = [sys.executable, "-m", "trainer.engine.server", str(policy), "--served-model-name", "policy"]
    spec = VllmServeSpec(argv, {}, "127.0.0.1", free_port(), "policy", root / "engines" / "token")
    with VllmServer(spec, root / "engine.log", start_timeout_s=120) as server:
        yield server.base_url, token
