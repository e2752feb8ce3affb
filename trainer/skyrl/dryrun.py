"""The dry-run stand-in for SkyRL's entry point: checks the overrides it is given and reports, without training.

    python -m trainer.skyrl.dryrun [--steps N] KEY=VALUE ...

What it does, every line labelled ``[dry run]``:

1. parses the overrides as SkyRL's entry point would take them and checks them (``values.problems``: fully-async,
   Megatron and rate-limit rules); a bad set prints one ``[dry run] invalid: ...`` line and exits 2;
2. prints the parsed config as YAML;
3. prints ``N`` metric blocks in SkyRL's console-logger form (``Step k:`` + a dict), each holding only quantities
   computed from the config (trajectories a step trains on, the algorithmic ceiling, the data-parallel size) and the
   measured seconds of that block's work. No reward or loss is made up: there was no training.

It needs only the standard library and PyYAML, so a Ray job runs it on any node with the repository as working dir.
"""

from __future__ import annotations

import argparse
import pprint
import sys
import time
from collections.abc import Mapping
from typing import Any

import yaml

from trainer.sizing import algorithmic_ceiling
from trainer.skyrl.values import OverrideError, nested, parse_overrides, policy_data_parallel, problems, split_keys

LABEL = "[dry run]"


def step_metrics(values: Mapping[str, Any], step: int) -> dict[str, Any]:
    """What one step of this config would hold, from the config alone (no training happened)."""
    batch = int(values.get("trainer.train_batch_size", 0))
    samples = int(values.get("generator.n_samples_per_prompt", 0))
    staleness = int(values.get("trainer.fully_async.max_staleness_steps", 0))
    return {
        "trainer/global_step": step,
        "trainer/epoch": 1,
        "generate/batch_num_seq": batch * samples,
        "dryrun/algorithmic_ceiling": algorithmic_ceiling(staleness, batch, samples),
        "dryrun/policy_dp_size": policy_data_parallel(values),
        "dryrun/overrides": len(values),
    }


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.skyrl.dryrun", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="metric blocks to print (default 2)")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as SkyRL's entry point takes them")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        values = parse_overrides(args.overrides)
    except OverrideError as error:
        print(f"{LABEL} invalid: {error}", flush=True)
        return 2
    found = problems(values)
    if found:
        print(f"{LABEL} invalid: {'; '.join(found)}", flush=True)
        return 2
    skyrl, ours = split_keys(list(values))
    print(f"{LABEL} overrides valid: {len(values)} keys ({len(skyrl)} SkyRL, {len(ours)} rl_recipe)", flush=True)
    print(f"{LABEL} config:", flush=True)
    print(yaml.safe_dump(nested(values), sort_keys=True, default_flow_style=False).rstrip(), flush=True)
    mark = started
    for step in range(1, args.steps + 1):
        metrics = step_metrics(values, step)
        now = time.perf_counter()
        metrics["timing/step"] = now - mark
        mark = now
        print(f"{LABEL} Step {step}:", flush=True)
        print(pprint.pformat(metrics), flush=True)
    print(f"{LABEL} done: {args.steps} steps in {time.perf_counter() - started:.3f} s, nothing trained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
