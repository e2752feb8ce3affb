"""The resource ledger's arithmetic (``trainer.cluster.ledger``), by hand."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from trainer.cluster.engine_job import FleetSpec, actor_options
from trainer.cluster.ledger import Claim, Phase, balance, fits, peak, shortfall
from trainer.cluster.reserve import unplaced_message

NODE = {"GPU": 8.0, "CPU": 192.0}
ENGINES = Claim("engines", 2, {"GPU": 8})
MEGATRON = Claim("megatron", 1, {"GPU": 8, "CPU": 8})
DRIVER = Claim("driver", 1, {"CPU": 1})


def test_a_claim_totals_its_bundles() -> None:
    assert ENGINES.total("GPU") == 16 and ENGINES.total("CPU") == 0
    assert MEGATRON.describe() == "1 × {GPU 8, CPU 8}"
    phase = Phase("hero", "training job", (ENGINES, MEGATRON, DRIVER))
    assert (phase.total("GPU"), phase.total("CPU")) == (24, 9)
    assert phase.resources() == ["GPU", "CPU"] and phase.label == "hero's training job"
    assert Phase("ablations", "training job", ()).label == "ablations' training job"


def test_three_full_nodes_hold_two_engines_and_a_trainer() -> None:
    assert fits((ENGINES, MEGATRON, DRIVER), [NODE] * 3) is None
    assert shortfall(Phase("hero", "training job", (ENGINES, MEGATRON, DRIVER)), [NODE] * 3) is None


def test_a_total_over_the_cluster_names_the_phase_the_holders_and_the_gap() -> None:
    phase = Phase("overfit", "training job", (ENGINES, MEGATRON, DRIVER))
    found = shortfall(phase, [NODE, NODE])  # 24 GPU wanted, 16 there
    assert found is not None and (found.resource, found.needed, found.available) == ("GPU", 24, 16)
    assert found.message() == (
        "overfit's training job needs 24 GPU (engines 16, megatron 8); the cluster has 16: 8 short"
    )


def test_bundles_that_fit_in_total_but_not_on_any_node_are_caught() -> None:
    # 6 + 6 + 4 = 16 GPU on two 8-GPU nodes: the 6s take a node each, leaving 2 + 2, and the 4 finds no node.
    wide = Claim("engines (TP6)", 2, {"GPU": 6})
    phase = Phase("systems", "training job", (wide, Claim("trainer", 1, {"GPU": 4})))
    nodes = [{"GPU": 8.0}, {"GPU": 8.0}]
    assert fits(phase.claims, nodes) is not None
    found = shortfall(phase, nodes)
    assert found is not None and found.stranded == "trainer" and (found.needed, found.available) == (16, 16)
    assert "but a bundle of trainer fits on no node that is left" in found.message()


def test_custom_resources_are_packed_like_gpus() -> None:
    nodes = [{"CPU": 1.0}, {"CPU": 1.0, "engine": 1.0}, {"CPU": 1.0, "trainer": 1.0}]
    ok = Phase("hero", "training job", (Claim("engine", 1, {"engine": 1}), Claim("job", 1, {"trainer": 1})))
    assert shortfall(ok, nodes) is None
    two_jobs = Phase("hero", "training job", (Claim("job", 2, {"trainer": 1}),))
    found = shortfall(two_jobs, nodes)
    assert found is not None and found.message().endswith("the cluster has 1: 1 short")


def test_balance_lists_every_phase_that_does_not_fit_and_peak_finds_the_first_largest() -> None:
    rollouts = Phase("derisk", "rollouts and evals", (ENGINES,))
    job = Phase("overfit", "training job", (ENGINES, MEGATRON))
    hero = Phase("hero", "training job", (ENGINES, MEGATRON))
    assert [f.phase.stage for f in balance([rollouts, job, hero], [NODE, NODE])] == ["overfit", "hero"]
    assert peak([rollouts, job, hero], "GPU") == (24, job)


def test_engine_hosts_claim_gpus_and_cpus_as_ray_wants_them() -> None:
    """Ray refuses ``CPU`` and ``GPU`` inside ``resources``: they go to ``num_cpus`` / ``num_gpus``."""
    assert actor_options({"GPU": 8}) == {"num_cpus": 0, "num_gpus": 8, "resources": None}
    assert actor_options({"engine": 1}) == {"num_cpus": 0, "num_gpus": 0, "resources": {"engine": 1}}
    assert actor_options({"GPU": 1, "CPU": 2, "h200": 1}) == {"num_cpus": 2, "num_gpus": 1, "resources": {"h200": 1}}


def test_an_unplaced_claim_names_its_holder_what_is_missing_and_what_was_free() -> None:
    message = unplaced_message(MEGATRON, 0, 300, free={"GPU": 2.0, "CPU": 40.0}, total={"GPU": 16.0, "CPU": 384.0})
    assert message.startswith(
        "megatron asked for 1 × {GPU 8, CPU 8}: 1 not placed by Ray within 300 s "
        "(free on the cluster: GPU 2 of 16, CPU 40 of 384)"
    )
    engines = unplaced_message(ENGINES, 1, 60, free={"CPU": 3.0}, total={"CPU": 3.0})
    assert "engines asked for 2 × {GPU 8}: 1 not placed by Ray within 60 s (free on the cluster: GPU 0 of 0)" in engines


def test_engines_of_one_fleet_take_ports_from_slices_of_their_own() -> None:
    """Two engines on one node each took the range's first free port, and the second died on "address in use"."""
    where = {"state_file": Path("e.json"), "logs_dir": Path("logs"), "token_file": Path("token")}
    spec = FleetSpec(model="m", served_model_name="p", engines=2, max_model_len=64, ports=(18000, 18063), **where)
    assert [spec.port_range(i) for i in range(2)] == [(18000, 18031), (18032, 18063)]
    assert spec.model_copy(update={"ports": None}).port_range(1) is None
    with pytest.raises(ValidationError, match="ports 18000-18000 hold fewer ports than the 2 engines"):
        FleetSpec(model="m", served_model_name="p", engines=2, max_model_len=64, ports=(18000, 18000), **where)
