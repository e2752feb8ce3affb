"""``recipe cluster``: render prints the golden overrides, engine the vllm spec; user errors exit 2 in one line."""

import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "trainer" / "skyrl" / "golden"
COSINE = ["--set", "trainer.lr_schedule=cosine", "--set", "trainer.total_steps=10"]
DRY_RUN = ["cluster", "submit", "--profile", "qwen36-35b", "--address", "http://127.0.0.1:1", "--dry-run"]


@pytest.mark.parametrize("profile", ["qwen36-35b", "qwen35-397b"])
def test_render_prints_the_golden_overrides(capsys, profile: str) -> None:
    assert main(["cluster", "render", "--profile", profile]) == 0
    assert capsys.readouterr().out == (GOLDEN / f"{profile}.txt").read_text()


def test_render_takes_an_arm_storage_and_profile_changes(capsys) -> None:
    argv = ["cluster", "render", "--profile", "qwen36-35b", "--arm", "baseline", "--storage", "s3://bucket/run",
            "--set", "rollout.max_staleness=1", "--set", "rollout.workers=32"]  # fmt: skip
    assert main(argv) == 0
    lines = set(capsys.readouterr().out.splitlines())
    assert {"trainer.algorithm.policy_loss_type=rollout_is", "trainer.algorithm.loss_reduction=token_mean"} <= lines
    assert {"trainer.ckpt_path=s3://bucket/run/ckpts", "trainer.fully_async.max_staleness_steps=1"} <= lines


def test_engine_prints_the_vllm_line_routes_and_harness_overrides(capsys, tmp_path) -> None:
    token = tmp_path / "token"
    argv = ["cluster", "engine", "--profile", "qwen35-397b", "--port", "8100", "--token-file", str(token)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 python -m trainer.vllm.gate --host 127.0.0.1 "
        f"--port 8100 --token-file {token} -- python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3.5-397B"
    )
    assert "--max-model-len 262144" in out and "--tensor-parallel-size 8" in out
    assert "http://127.0.0.1:8100/pause?mode=keep" in out and "--set engine.url=http://127.0.0.1:8100" in out
    assert f"--set engine.api_key_file={token}" in out and token.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cluster", "render", "--profile", "local"], "has no cluster section"),
        (["cluster", "render", "--profile", "qwen36-35b", "--arm", "nope"], "no ablation arm 'nope'"),
        (["cluster", "render", "--profile", "qwen36-35b", *COSINE], "cosine"),
        (
            ["cluster", "submit", "--profile", "qwen36-35b", "--address", "http://127.0.0.1:1"],
            "connect to http://127.0.0.1:1",
        ),
        (["cluster", "submit", "--profile", "qwen36-35b", "--address", "localhost:8265", "--dry-run"], "dashboard URL"),
        ([*DRY_RUN, "--env", "NOVALUE"], "--env 'NOVALUE' is not KEY=VALUE"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipe: error: ") and message in err and err.count("\n") == 1


def test_an_unreachable_cluster_is_a_user_error(capsys) -> None:
    from envs.net import free_port

    argv = ["cluster", "submit", "--profile", "qwen36-35b", "--address", f"http://127.0.0.1:{free_port()}", "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipe: error: connect to http://127.0.0.1:") and err.count("\n") == 1


def test_the_core_install_never_imports_skyrl_or_vllm() -> None:
    """The flow hands work to a cluster from the core venv: no SkyRL, vLLM or Megatron, and not even Ray (its Jobs API
    is spoken over plain HTTP) on that path."""
    code = (
        "import sys\n"
        "import cli.main, cli.commands.cluster\n"
        "import trainer.skyrl.render, trainer.skyrl.submit, trainer.vllm.launch, trainer.skyrl.dryrun\n"
        "import tasks.cluster, tasks.fleet, flows.placement, flows.preflight, flows.dry_run, trainer.vllm.remote\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
        "from cli.main import main\n"
        "assert main(['cluster', 'render', '--profile', 'qwen36-35b']) == 0\n"
        "assert not {'skyrl', 'vllm', 'megatron'} & {m.split('.')[0] for m in sys.modules}, 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
