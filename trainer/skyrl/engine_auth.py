"""The run's engine token on SkyRL's side: SkyRL 0.3's HTTP inference client, sending it on every request.

A SkyRL job generates with the run's engines (``external_server_urls``: ``flows.ledger``), and each engine answers
only to the run's token (``trainer.vllm.gate``). SkyRL's ``RemoteInferenceClient`` has no API-key setting; every call
it makes — generation through the router, pause / resume and weight sync on each engine — opens its requests through
``_get_session``, so ``GatedInferenceClient`` puts the token on the session. The router SkyRL starts over the engines
gets no key: it passes each request's own ``Authorization`` on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import trainer.skyrl.py311  # noqa: F401  (before SkyRL: its TypedDicts on Python 3.11)

# isort: split
import aiohttp
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

from envs.tokens import read_token_file

__all__ = ["GatedInferenceClient", "RemoteInferenceClient", "engine_token"]


@dataclass
class GatedInferenceClient(RemoteInferenceClient):
    """SkyRL's HTTP inference client with the run's engine token on its session (the module docstring)."""

    engine_token: str | None = field(default=None, repr=False)

    async def _get_session(self) -> aiohttp.ClientSession:
        session = await super()._get_session()
        if self.engine_token:
            session.headers["Authorization"] = f"Bearer {self.engine_token}"
        return session

    @classmethod
    def of(cls, client: RemoteInferenceClient, token: str) -> GatedInferenceClient:
        own = {f.name: getattr(client, f.name) for f in fields(client) if f.init and not f.name.startswith("_")}
        return cls(**own, engine_token=token)


def engine_token(cfg: Any) -> str | None:
    """The run's engine token from ``rl_recipe.engine.token_file`` (None: the job brings its own engines)."""
    path = cfg.rl_recipe.get("engine", {}).get("token_file")
    return read_token_file(Path(path)) if path else None
