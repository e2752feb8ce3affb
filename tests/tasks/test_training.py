from envs.harness.agent import HarnessConfig
from envs.harness.policy import PolicyHarness
from tasks.artifacts import ProgressArtifact
from tasks.training import loop_config
from trainer.local import TrainerConfig
from trainer.loops.kinds import LoopKind


def test_a_stage_loop_passes_the_policys_terminal_turn_limit_on_to_its_checkpoints():
    settings = PolicyHarness(
        apps=("sheets",), harness=HarnessConfig(max_tokens_per_turn=96), terminal_max_tokens_per_turn=384
    )
    for kind in LoopKind:
        loop = loop_config(
            kind,
            task_ids=["t1"],
            settings=settings,
            trainer=TrainerConfig(lr=1e-4),
            prompts_per_step=2,
            samples_per_prompt=2,
            steps=1,
            seed=0,
            checkpoint_every=1,
            max_num_seqs=4,
        )
        assert loop.policy_harness() == settings  # what every checkpoint's harness.json holds


def test_a_resumed_loops_progress_counts_from_the_step_it_resumed_at(caplog):
    with caplog.at_level("INFO"), ProgressArtifact("6-hero", "train-hero", total=40) as progress:
        progress.advance("reward 0.776", to=36)  # the first step after a resume from step 35's checkpoint
        progress.advance("reward 0.922", to=37)
        progress.advance("one more item")
    assert progress.done == 38
    assert "36/40 reward 0.776" in caplog.text
