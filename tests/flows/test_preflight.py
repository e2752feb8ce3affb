"""A profile that cannot run where its backends say fails at once with one line that says what is missing; the dry
run prints what would run where and runs nothing."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.main import main
from envs.net import free_port
from flows import dry_run, skyrl_jobs
from flows.config import load_profile
from flows.placement import PlacementError
from flows.preflight import preflight

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("profile", ["qwen36-35b", "qwen35-397b"])
def test_a_cluster_profile_without_a_cluster_fails_in_seconds_with_one_line(profile: str) -> None:
    started = time.monotonic()
    command = [sys.executable, "-m", "cli", "run", "--profile", profile]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and elapsed < 10, (elapsed, done.stderr[-500:])
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"recipe: error: profile '{profile}' runs on a Ray cluster")
    assert "--set cluster.ray_address=http://HEAD:8265" in done.stderr


def test_every_reason_a_profile_cannot_run_is_named() -> None:
    hub_here = load_profile("qwen36-35b", ["backends.engine=local", "backends.trainer=local"])
    with pytest.raises(PlacementError, match=r"policy.source hub .* needs engines that serve it"):
        preflight(hub_here)
    unreachable = load_profile("qwen36-35b", [f"cluster.ray_address=http://127.0.0.1:{free_port()}"])
    with pytest.raises(PlacementError, match=r"cannot reach the Ray cluster.s dashboard .*recipe cluster up"):
        preflight(unreachable)
    no_vllm = load_profile("smoke", ["backends.engine=vllm", "engine.vllm.python=.venv-none/bin/python"])
    with pytest.raises(PlacementError, match=r"engine\.vllm\.python \.venv-none/bin/python is not an interpreter here"):
        preflight(no_vllm)
    preflight(load_profile("smoke"))  # everything here: nothing to check


def test_the_dry_run_prints_each_stages_placement_and_runs_nothing(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(skyrl_jobs, "SKYRL_PYTHON", tmp_path / "no-python")  # the SkyRL check has a test of its own
    assert main(["run", "--profile", "qwen36-35b", "--dry-run", "--runs-root", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "cluster: Ray dashboard NOT SET" in out and "10 × vLLM (cuda), each with {'GPU': 8.0} on the cluster" in out
    assert "--tensor-parallel-size 8" in out and "--weight-transfer-config" in out
    for index, stage in enumerate(["derisk", "tito", "systems", "overfit", "ablations", "hero", "transfer"], 1):
        assert f"\n{index} {stage}\n" in out
    assert "job overfit: sync loop, 40 steps of 32 prompts × 8: python -m trainer.skyrl.main <overrides>" in out
    assert "job hero-dppo_prompt_mean_nudge: async loop, 300 steps of 16 prompts × 16" in out
    assert "trainer.algorithm.policy_loss_type=dppo" in out and "job baseline differs in" in out
    assert "not checked against SkyRL's config classes: no .venv-cluster here" in out
    assert not (tmp_path / "runs").exists()


def test_the_dry_run_of_a_cpu_cluster_names_its_nodes_and_entry_points() -> None:
    lines = "\n".join(dry_run.plan_lines(load_profile("cluster-cpu"), check=False))
    assert "cluster: Ray dashboard http://127.0.0.1:8265" in lines
    assert (
        "1 × vLLM (cpu), each with {'engine': 1.0} on the cluster" in lines and "--no-enable-chunked-prefill" in lines
    )
    assert "reload_weights from a new folder per version" in lines
    assert "-m trainer.cluster.train_job <job folder>/spec.json on a node with {'trainer': 1.0}" in lines


@pytest.mark.parametrize(("loop", "kind"), [("sync", "sync"), ("async", "async")])
def test_the_dry_run_shows_the_loop_the_ablation_arms_train_with(loop: str, kind: str) -> None:
    config = load_profile("local", [f"stages.ablations.loop={loop}", "stages.ablations.steps=3"])
    lines = dry_run.plan_lines(config, check=False)
    arms = [line for line in lines if line.strip().startswith("train ") and "3 steps" in line]
    assert len(arms) == len(config.stages.ablations.arms)
    assert all(f"{kind} loop, 3 steps" in line for line in arms)
