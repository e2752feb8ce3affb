"""The Excel functions we add to pycel: hand-computed values."""

from __future__ import annotations

import pytest

from envs.apps import sheet_functions as fn


def test_median_product_and_spread() -> None:
    assert fn.median(((1,), (3,), ("x",)), 10) == 3  # text in a range is ignored: median of 1, 3, 10
    assert fn.median((2, 4)) == 3
    assert fn.product(((2, 3),), 4) == 24
    # values 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squared deviations sum 32
    values = ((2, 4, 4, 4, 5, 5, 7, 9),)
    assert fn.var(values) == pytest.approx(32 / 7)
    assert fn.varp(values) == pytest.approx(4)
    assert fn.stdevp(values) == pytest.approx(2)
    assert fn.stdev_s(values) == pytest.approx((32 / 7) ** 0.5)


def test_errors_propagate_and_empty_inputs() -> None:
    assert fn.median(((1, "#DIV/0!"),)) == "#DIV/0!"
    assert fn.median(()) == "#NUM!"
    assert fn.stdev((5,)) == "#DIV/0!"


def test_pmt() -> None:
    # 1000 borrowed over 12 months at 1 % a month: 1000 * 0.01 * 1.01^12 / (1.01^12 - 1) = 88.8488...
    assert fn.pmt(0.01, 12, 1000) == pytest.approx(-88.848788, rel=1e-6)
    assert fn.pmt(0, 10, 1000) == -100


def test_irr() -> None:
    # -100 now, +110 in a year: 10 %. -100, 60, 60: r solves 60/(1+r) + 60/(1+r)^2 = 100 -> r = 0.130662...
    assert fn.irr(((-100, 110),)) == pytest.approx(0.10)
    assert fn.irr(((-100,), (60,), (60,))) == pytest.approx(0.1306623863, rel=1e-8)
    assert fn.irr(((100, 50),)) == "#NUM!"


def test_counta_counts_every_non_empty_value() -> None:
    assert fn.counta(((1, "x", None), (True, "", "#N/A")), 7) == 5  # 1, "x", True, "#N/A", 7
