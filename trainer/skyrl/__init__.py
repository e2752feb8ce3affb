"""The SkyRL backend: our composed config as SkyRL 0.3.x overrides, a Ray Jobs submission, metric ingestion, and our
TITO harness as SkyRL's generator. SkyRL, vLLM and Megatron run on the cluster (the ``cluster`` extra); only
``generator`` and ``main`` import SkyRL (they run on the cluster, never in the core install), so the core install
reads, renders and tests all the rest.

* ``render`` — ``SkyRLRun`` (model, trainer, harness, rollout plan, cluster layout) → ``Overrides`` (``key=value``),
  through the tables of ``mappings`` (our enums → SkyRL's values).
* ``values`` — the override wire format: formatting, parsing, and our own checks of a rendered set.
* ``dryrun`` — ``python -m trainer.skyrl.dryrun KEY=VALUE ...``: the stand-in job that checks the overrides and prints
  the parsed config and metric blocks (labelled dry run) instead of training.
* ``submit`` — the job on a Ray cluster through the Jobs API; logs streamed; metric blocks → ``train_steps`` rows.
* ``metrics`` — SkyRL's console metric blocks and their mapping to our catalog's ``train_steps`` columns.
* ``schema_check`` — a script run with SkyRL installed: builds SkyRL's own config classes from a rendered set.
* ``generator`` — ``RecipeGenerator``: SkyRL's ``GeneratorInterface`` over our ``run_group``, so SkyRL trains on
  exactly our trajectories (tokens, loss mask, rollout logprobs, reward).
* ``main`` — the job a real submission runs: SkyRL's config from the overrides, our task sets, our generator.
"""
