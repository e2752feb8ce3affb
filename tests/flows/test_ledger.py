"""The ledgers of the shipped cluster profiles (``flows.ledger``): who holds which GPUs in each phase, whether it fits,
and a profile that cannot fit refused before any work."""

import pytest

from cli.main import main
from flows.config import ProfileError, load_profile
from flows.ledger import run_ledger
from flows.placement import PlacementError, fleet_spec
from flows.preflight import preflight


def holders(profile: str, phase: str, *changes: str) -> dict[str, float]:
    ledger = run_ledger(load_profile(profile, list(changes)))
    assert ledger is not None
    [first] = [p for p in ledger.phases if p.label == phase]
    return {claim.holder: claim.total("GPU") for claim in first.claims}


def test_the_35b_hero_holds_every_gpu_once_and_its_rollouts_leave_the_train_nodes_free() -> None:
    ledger = run_ledger(load_profile("qwen36-35b"))
    assert ledger is not None and len(ledger.nodes) == 14 and ledger.shortfalls() == []
    assert holders("qwen36-35b", "derisk's rollouts and evals") == {"run engines (vLLM TP8)": 80}
    # one owner of the engines: SkyRL's job brings none of its own, so engines 80 + Megatron 32 = the cluster's 112
    job = holders("qwen36-35b", "hero's training job")
    assert job == {"run engines (vLLM TP8)": 80, "Megatron policy workers": 32, "SkyRL driver (our generator)": 0}
    assert "ledger balances: every phase fits the cluster; peak 112 GPU in systems' training job" in ledger.lines()


def test_the_397b_hero_balances_at_160_gpus() -> None:
    ledger = run_ledger(load_profile("qwen35-397b"))
    assert ledger is not None and ledger.shortfalls() == []
    assert sum(holders("qwen35-397b", "hero's training job").values()) == 12 * 8 + 8 * 8 == 160


def test_without_run_engines_the_job_brings_its_own_and_the_ledger_counts_them() -> None:
    job = holders("qwen36-35b", "hero's training job", "backends.engine=openai", "engine.url=http://127.0.0.1:9")
    assert job["SkyRL's own engines"] == 80 and "run engines (vLLM TP8)" not in job


def test_an_oversubscribed_profile_is_refused_before_any_work_in_one_line() -> None:
    config = load_profile("qwen36-35b", ["cluster.engines=12"])  # 96 engine GPUs + 32 Megatron on 112
    with pytest.raises(PlacementError) as refused:
        preflight(config)  # before the missing ray_address: nothing is contacted
    message = str(refused.value)
    assert "\n" not in message
    assert "systems' training job needs 128 GPU (run engines (vLLM TP8) 96, Megatron policy workers 32)" in message
    assert "the cluster has 112: 16 short" in message


def test_recipe_plan_prints_the_ledger_and_fails_an_oversubscribed_layout(capsys) -> None:
    assert main(["plan", "--profile", "qwen36-35b"]) == 0
    assert "resource ledger — cluster: 14 nodes, GPU 112, CPU 2688" in capsys.readouterr().out
    assert main(["plan", "--profile", "qwen36-35b", "--engines", "12"]) == 1
    out = capsys.readouterr().out
    assert "does not fit: systems' training job needs 128 GPU" in out and out.rstrip().endswith("plan does NOT fit")


def test_a_cpu_clusters_ledger_counts_the_nodes_cluster_up_starts() -> None:
    ledger = run_ledger(load_profile("cluster-cpu"))
    assert ledger is not None and ledger.shortfalls() == []
    assert ledger.nodes == ({"CPU": 1}, {"CPU": 1, "engine": 1}, {"CPU": 1, "trainer": 1})


def test_a_profile_without_a_cluster_has_no_ledger() -> None:
    assert run_ledger(load_profile("smoke")) is None


def test_the_gpu_shaped_cpu_cluster_holds_the_gpu_plan_and_refuses_a_third_engine() -> None:
    ledger = run_ledger(load_profile("cluster-gpu-shape"))
    assert ledger is not None and ledger.shortfalls() == []
    assert holders("cluster-gpu-shape", "hero's training job") == {
        "run engines (vLLM TP1)": 2,
        "Megatron policy workers (stand-in: held by our loop)": 2,
        "training job (our loop)": 0,
    }
    assert "ledger balances: every phase fits the cluster; peak 4 GPU in systems' training job" in ledger.lines()
    with pytest.raises(PlacementError, match=r"systems' training job needs 5 GPU .* the cluster has 4: 1 short"):
        preflight(load_profile("cluster-gpu-shape", ["cluster.engines=3"]))


def test_the_megatron_stand_in_is_our_loops_to_hold() -> None:
    with pytest.raises(ProfileError, match=r"megatron_stand_in is for backends.trainer 'ray_job'"):
        load_profile("qwen36-35b", ["cluster.megatron_stand_in=true"])


@pytest.mark.parametrize(
    ("profile", "per_node"), [("qwen36-35b", 1), ("qwen35-397b", 1), ("cluster-gpu-shape", 2), ("cluster-cpu", None)]
)
def test_gpu_engines_hold_whole_nodes_as_the_ledger_packs_them(tmp_path, profile: str, per_node: int | None) -> None:
    """A group of ``gpus_per_node / TP`` engines per node: Ray's default spread put two TP1 engines on two 2-GPU
    nodes and left no whole node for Megatron's bundle. Engines on custom resources (a CPU cluster) go where Ray puts
    them."""
    spec = fleet_spec(load_profile(profile), tmp_path, str(tmp_path / "policy"), 1024)
    assert spec.engines_per_node == per_node
