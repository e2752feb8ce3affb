"""The harness settings an eval runs with: the policy's harness.json, per harness, with the spec's overrides on top."""

from envs.harness.agent import HarnessConfig
from envs.harness.policy import PolicyHarness, write_policy_harness
from evals.resolved_harness import resolve_harness
from evals.sources import SourceKind, TaskSource
from evals.spec import EngineSpec, EvalSpec, HarnessKind, HarnessOverrides

TAUGHT = PolicyHarness(
    apps=("sheets",), harness=HarnessConfig(max_tokens_per_turn=96), terminal_max_tokens_per_turn=384
)


def _spec(tmp_path, harness: HarnessKind, **overrides) -> EvalSpec:
    return EvalSpec(
        tasks=TaskSource(kind=SourceKind.BUNDLED_TERMINAL),
        harness=harness,
        engine=EngineSpec(base_url="http://127.0.0.1:1", model="m"),
        out_dir=tmp_path / "out",
        policy=tmp_path,
        harness_config=HarnessOverrides(**overrides),
    )


def test_the_terminal_harness_gets_the_turn_limit_the_policy_learned_scripts_with(tmp_path):
    write_policy_harness(tmp_path, TAUGHT)
    assert resolve_harness(_spec(tmp_path, HarnessKind.TERMINAL)).settings.harness.max_tokens_per_turn == 384
    assert resolve_harness(_spec(tmp_path, HarnessKind.CODE_ONLY)).settings.harness.max_tokens_per_turn == 96
    overridden = resolve_harness(_spec(tmp_path, HarnessKind.TERMINAL, max_tokens_per_turn=50))
    assert overridden.settings.harness.max_tokens_per_turn == 50 and overridden.overridden == ["max_tokens_per_turn"]
