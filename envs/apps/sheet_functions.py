"""Excel functions pycel 1.0b30 lacks, loaded into its evaluator as a plugin module (``ExcelCompiler(plugins=...)``).

pycel resolves a formula's function ``FOO.BAR`` to the Python name ``foo_bar`` in its plugin modules first, so every
public function here is an Excel function. Arguments arrive as pycel passes them: scalars, or ranges as tuples of rows.
Semantics follow Excel: numbers inside ranges count, text and booleans inside ranges are ignored, the first error value
(``#DIV/0!`` ...) in the arguments is returned as the result.
"""

from __future__ import annotations

import math
import statistics

from pycel.excelutil import DIV0, ERROR_CODES, NUM_ERROR, flatten

__all__ = [
    "counta",
    "irr",
    "median",
    "pmt",
    "product",
    "stdev",
    "stdev_p",
    "stdev_s",
    "stdevp",
    "var",
    "var_p",
    "var_s",
    "varp",
]


def _numbers(args: tuple[object, ...]) -> list[float] | str:
    """The numeric values among the (flattened) arguments, or the first Excel error value found."""
    values = list(flatten(args))
    error = next((v for v in values if isinstance(v, str) and v in ERROR_CODES), None)
    if error is not None:
        return error
    return [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def counta(*args: object) -> int:
    """COUNTA: the number of non-empty values (numbers, text, booleans and error values all count)."""
    return sum(1 for value in flatten(args) if value is not None and value != "")


def median(*args: object) -> float | str:
    """MEDIAN: the middle value of the sorted numbers (mean of the two middle ones for an even count)."""
    values = _numbers(args)
    if isinstance(values, str):
        return values
    return statistics.median(values) if values else NUM_ERROR


def product(*args: object) -> float | str:
    """PRODUCT: ∏ xᵢ over the numbers (0 when there are none, as in Excel)."""
    values = _numbers(args)
    if isinstance(values, str):
        return values
    return math.prod(values) if values else 0


def _spread(args: tuple[object, ...], sample: bool, root: bool) -> float | str:
    """Variance Σ(xᵢ − x̄)² / (n − 1) (sample) or / n (population); its square root when ``root``."""
    values = _numbers(args)
    if isinstance(values, str):
        return values
    if len(values) < (2 if sample else 1):
        return DIV0
    variance = statistics.variance(values) if sample else statistics.pvariance(values)
    return math.sqrt(variance) if root else variance


def stdev(*args: object) -> float | str:
    """STDEV / STDEV.S: sample standard deviation √(Σ(xᵢ − x̄)² / (n − 1))."""
    return _spread(args, sample=True, root=True)


def stdevp(*args: object) -> float | str:
    """STDEVP / STDEV.P: population standard deviation √(Σ(xᵢ − x̄)² / n)."""
    return _spread(args, sample=False, root=True)


def var(*args: object) -> float | str:
    """VAR / VAR.S: sample variance Σ(xᵢ − x̄)² / (n − 1)."""
    return _spread(args, sample=True, root=False)


def varp(*args: object) -> float | str:
    """VARP / VAR.P: population variance Σ(xᵢ − x̄)² / n."""
    return _spread(args, sample=False, root=False)


stdev_s = stdev
stdev_p = stdevp
var_s = var
var_p = varp


def pmt(rate: float, nper: float, pv: float, fv: float = 0, type: int = 0) -> float | str:
    """PMT: the level payment of a loan/annuity.

    rate = 0: −(pv + fv) / nper; otherwise −r·(pv·(1+r)ⁿ + fv) / ((1 + r·type)·((1+r)ⁿ − 1)), ``type`` 1 meaning
    payments at the start of each period (Excel's documented formula; the argument names are Excel's).
    """
    args = (rate, nper, pv, fv, type)
    error = next((a for a in args if isinstance(a, str) and a in ERROR_CODES), None)
    if error is not None:
        return error
    if nper == 0:
        return NUM_ERROR
    if rate == 0:
        return -(pv + fv) / nper
    growth = (1 + rate) ** nper
    return -rate * (pv * growth + fv) / ((1 + rate * type) * (growth - 1))


def irr(values: object, guess: float = 0.1) -> float | str:
    """IRR: the rate r with NPV(r) = Σᵢ cᵢ / (1+r)ⁱ = 0 (i from 0), by Newton's method from ``guess`` as Excel does.

    Returns ``#NUM!`` when the cash flows do not change sign or the iteration does not converge in 100 steps to
    |Δr| < 1e-10.
    """
    flows = _numbers((values,))
    if isinstance(flows, str):
        return flows
    if not (any(c > 0 for c in flows) and any(c < 0 for c in flows)):
        return NUM_ERROR
    rate = guess
    for _ in range(100):
        if rate <= -1:
            return NUM_ERROR
        npv = sum(c / (1 + rate) ** i for i, c in enumerate(flows))
        slope = sum(-i * c / (1 + rate) ** (i + 1) for i, c in enumerate(flows))
        if slope == 0:
            return NUM_ERROR
        step = npv / slope
        rate -= step
        if abs(step) < 1e-10:
            return rate
    return NUM_ERROR
