"""The synchronous loop really learns: pass rate of the bootstrapped base on a fixed set of toy train tasks rises,
by a one-sided two-proportion z-test at p < 0.01 (not a fixed threshold that could pass by chance).

The base comes from ``RECIPE_BASE_POLICY`` (a bootstrapped policy folder) or from ``models/base``, the cache ``make
demo`` fills (keyed by spec + environment content; bootstrapped here if missing, ~9-15 min on 2 cores).
"""

import asyncio
import math
import os
from pathlib import Path

import pytest
import torch

from envs.build import ensure_environment, load_tasks
from envs.harness.agent import AgentSetup
from envs.types import Split
from trainer.bootstrap import BootstrapReport, BootstrapSpec, bootstrap, harness_config, select_tasks
from trainer.local import TrainerConfig, latest_checkpoint
from trainer.local.checkpoint import POLICY_DIR
from trainer.loops import LoopJob, SyncLoopConfig, TaskFilter, run_sync_loop
from trainer.loops.engine_adapter import InProcessEngine
from trainer.loops.evaluation import evaluate_reward, tasks_with_variance
from trainer.loops.policy import CHECKPOINTS, open_engine
from trainer.loops.rollouts import Rollouts, default_envs

CACHE = Path("runs/test-cache")
BASE_MODELS = Path(__file__).resolve().parents[3] / "models" / "base"


def one_sided_z_p(passed_before: int, passed_after: int, n: int) -> float:
    """p-value of H1: p_after > p_before, pooled two-proportion z-test with n trials each.

    z = (p̂₂ − p̂₁) / sqrt(p̄(1 − p̄)(2/n)), p̄ = (c₁ + c₂)/(2n); p = 1 − Φ(z) = erfc(z/√2)/2.
    """
    pooled = (passed_before + passed_after) / (2 * n)
    if pooled in (0.0, 1.0):
        return 1.0
    z = (passed_after - passed_before) / n / math.sqrt(pooled * (1 - pooled) * 2 / n)
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_z_test_by_hand():
    # 40/100 vs 60/100: p̄ = 0.5, z = 0.2 / sqrt(0.25·0.02) = 2.828, p = 0.00234
    assert one_sided_z_p(40, 60, 100) == pytest.approx(0.00234, abs=1e-4)
    assert one_sided_z_p(60, 40, 100) == pytest.approx(1 - 0.00234, abs=1e-4)
    assert one_sided_z_p(0, 0, 10) == 1.0


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the base's first bootstrap, then 15 loop steps and two 32-sample evaluations
def test_sync_loop_raises_the_pass_rate(tmp_path):
    torch.set_num_threads(1)
    data = CACHE / "data"
    ensure_environment(data)
    base = Path(os.environ.get("RECIPE_BASE_POLICY") or bootstrap(BootstrapSpec(), data, BASE_MODELS).path)
    spec = BootstrapReport.model_validate_json((base / "bootstrap.json").read_text()).spec
    candidates = [t for t in select_tasks(load_tasks(data), spec) if t.split is Split.TRAIN]
    config = SyncLoopConfig(
        prompts_per_step=8,
        samples_per_prompt=8,
        steps=15,
        tasks=TaskFilter(tier=None, split=None),
        harness=harness_config(spec),
        trainer=TrainerConfig(lr=1e-4),
        apps=spec.apps,
        checkpoint_every=0,
        max_num_seqs=64,
    )
    samples = 32
    envs = default_envs(data / "worlds", spec.apps)

    def on_policy(weights: Path, measure):
        engine = open_engine(weights, config.engine_config())
        try:
            return asyncio.run(measure(InProcessEngine(engine), engine.tokenizer))
        finally:
            engine.close()

    def screen(client, tokenizer):
        return tasks_with_variance(
            Rollouts(envs, AgentSetup(client, tokenizer, config.harness), seed=7), candidates, n=8
        )

    def pass_count(weights: Path) -> int:
        def measure(client, tokenizer):
            return evaluate_reward(
                Rollouts(envs, AgentSetup(client, tokenizer, config.harness), seed=99), train, n=samples
            )

        return round(on_policy(weights, measure)[1] * samples * len(train))

    train = on_policy(base, screen)[:8]
    assert len(train) >= 4, f"only {len(train)} tasks have reward variance under the base: it cannot learn"
    config = config.model_copy(update={"tasks": TaskFilter(tier=None, split=None, ids=tuple(t.task_id for t in train))})
    before = pass_count(base)
    run_sync_loop(LoopJob(base, train, data / "worlds", tmp_path), config)
    after = pass_count(latest_checkpoint(tmp_path / CHECKPOINTS) / POLICY_DIR)
    n = samples * len(train)
    p = one_sided_z_p(before, after, n)
    assert p < 0.01, f"pass rate {before}/{n} → {after}/{n}: one-sided p = {p:.3g}"
