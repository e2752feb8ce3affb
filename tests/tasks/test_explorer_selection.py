"""Which trajectories a static export holds (``tasks.explorer.selection``): hand-computed samples on tiny runs."""

from __future__ import annotations

from collections import Counter

from tasks.explorer.selection import choose_sample, spread_order


def row(id_: int, stage: str, source: str, policy: str, task: str = "t", sample: int = 0) -> dict:
    return {"id": id_, "stage": stage, "source": source, "policy": policy, "task_id": task, "sample_index": sample}


def test_spread_order_reads_the_bits_backwards() -> None:
    assert spread_order(5) == [0, 4, 2, 1, 3]
    assert spread_order(8) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert spread_order(1) == [0] and spread_order(0) == []
    assert sorted(spread_order(1000)) == list(range(1000))
    first_ten = spread_order(1000)[:10]
    assert max(first_ten) > 800 and min(first_ten) == 0  # a prefix reaches across the whole range


def test_a_run_that_fits_is_held_whole() -> None:
    rows = [row(i, "derisk", "base-rollouts", "base") for i in (3, 1, 2)]
    assert choose_sample(rows, 3) == [1, 2, 3]


def test_every_stage_gets_its_share_and_pairs_stay_together() -> None:
    overfit = [row(i, "overfit", "train/overfit", "overfit") for i in range(1, 11)]  # ids 1-10
    hero = [
        row(11 + 2 * k + j, "hero", "eval/heldout", policy, task=f"t{k}")
        for k in range(3)
        for j, policy in enumerate(("base", "trained"))
    ]  # ids 11-16: (11, 12), (13, 14) ...
    transfer = [row(17, "transfer", "eval/mcq", "trained"), row(18, "transfer", "eval/mcq", "trained")]
    # Smallest first: transfer takes both (share 8 // 3 = 2); hero's share is 6 // 2 = 3, one pair of 2 fits (the
    # second in spread order would make 4); overfit takes the 4 left, spread over 1-10: indices 0, 8, 4, 2.
    chosen = choose_sample(overfit + hero + transfer, 8)
    assert chosen == [1, 3, 5, 9, 11, 12, 17, 18]  # fmt: skip


def test_a_small_limit_still_reaches_every_stratum() -> None:
    rows = [row(i, "derisk", "base-rollouts", "base") for i in range(1, 17)]
    rows += [row(16 + i, "overfit", "train/overfit", "overfit") for i in range(1, 13)]
    rows += [row(29 + 2 * k + j, "hero", "eval/heldout", p, task=f"t{k // 2}", sample=k % 2)
             for k in range(4) for j, p in enumerate(("base", "trained"))]  # fmt: skip
    chosen = choose_sample(rows, 5)
    stages = Counter(r["stage"] for r in rows if r["id"] in chosen)
    assert len(chosen) == 5 and stages == {"hero": 2, "overfit": 1, "derisk": 2}
    hero = [r for r in rows if r["id"] in chosen and r["stage"] == "hero"]
    assert {r["policy"] for r in hero} == {"base", "trained"} and len(
        {(r["task_id"], r["sample_index"]) for r in hero}
    ) == 1
