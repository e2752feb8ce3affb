"""The resource ledger of a cluster run: in each phase of each stage, which processes hold which Ray resources, and
whether the cluster's nodes can hold them all at once.

A **claim** is one holder's placement: ``bundles`` × ``bundle`` (Ray resources, e.g. ``{"GPU": 8, "CPU": 9}``), each
bundle on one node — how Ray places an actor or a placement-group bundle. A **phase** is what holds resources at the
same time: the run's engines during every stage, plus a training job's trainer and driver while it runs. A phase
**fits** when first-fit-decreasing packs every bundle onto the nodes' capacities (the largest GPU bundles first, as
they are the ones that can strand). First-fit decreasing can miss a packing that exists; the ledger then refuses a
plan Ray might have scheduled, never the other way round — a refusal names the phase, the resource and the shortfall.

    phases = [Phase("systems", "job trial-0", (fleet, megatron, driver)), ...]
    shortfalls = balance(phases, nodes)          # [] when every phase fits
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Resources = Mapping[str, float]


@dataclass(frozen=True)
class Claim:
    holder: str
    """Who holds it, in words: ``run engines (vLLM, TP8)``, ``Megatron policy workers``, ``SkyRL driver``."""
    bundles: int
    bundle: Resources
    """Ray resources of one bundle; each bundle lands on one node."""

    def total(self, resource: str) -> float:
        return self.bundles * self.bundle.get(resource, 0.0)

    def describe(self) -> str:
        """``10 × {GPU 8, CPU 9}``."""
        return f"{self.bundles} × {{{', '.join(f'{k} {_number(v)}' for k, v in self.bundle.items())}}}"


@dataclass(frozen=True)
class Phase:
    stage: str
    name: str
    """What runs: ``rollouts and evals``, ``training job``."""
    claims: tuple[Claim, ...]
    repeats: int = 1
    """How many times the phase recurs, one after another (a stage's training jobs)."""

    @property
    def label(self) -> str:
        """``ablations' training job``."""
        possessive = "'" if self.stage.endswith("s") else "'s"
        return f"{self.stage}{possessive} {self.name}"

    def total(self, resource: str) -> float:
        return sum(claim.total(resource) for claim in self.claims)

    def resources(self) -> list[str]:
        """Every resource a claim of the phase names, GPU first."""
        names = {name for claim in self.claims for name in claim.bundle}
        return sorted(names, key=lambda name: (name != "GPU", name))


@dataclass(frozen=True)
class Shortfall:
    phase: Phase
    resource: str
    needed: float
    available: float
    stranded: str | None = None
    """The claim a bundle of which found no node although the totals fit (fragmentation): its holder."""

    def message(self) -> str:
        """One line: the phase, who needs what, and what is missing."""
        holders = ", ".join(
            f"{claim.holder} {_number(claim.total(self.resource))}"
            for claim in self.phase.claims
            if claim.total(self.resource)
        )
        if self.stranded is None:
            return (
                f"{self.phase.label} needs {_number(self.needed)} {self.resource} ({holders}); the cluster has "
                f"{_number(self.available)}: {_number(self.needed - self.available)} short"
            )
        return (
            f"{self.phase.label} needs {_number(self.needed)} {self.resource} ({holders}) and the cluster has "
            f"{_number(self.available)}, but a bundle of {self.stranded} fits on no node that is left"
        )


def cluster_total(nodes: Sequence[Resources], resource: str) -> float:
    return sum(node.get(resource, 0.0) for node in nodes)


def fits(claims: Sequence[Claim], nodes: Sequence[Resources]) -> Claim | None:
    """Pack every bundle of ``claims`` onto ``nodes`` (first fit, largest bundles first by GPU then CPU then the
    rest); the claim whose bundle found no node, or None when all fit."""
    free = [dict(node) for node in nodes]
    bundles = [(claim, claim.bundle) for claim in claims for _ in range(claim.bundles)]
    bundles.sort(key=lambda item: (-item[1].get("GPU", 0.0), -item[1].get("CPU", 0.0), -sum(item[1].values())))
    for claim, bundle in bundles:
        node = next((n for n in free if all(n.get(k, 0.0) >= v for k, v in bundle.items())), None)
        if node is None:
            return claim
        for key, value in bundle.items():
            node[key] -= value
    return None


def shortfall(phase: Phase, nodes: Sequence[Resources]) -> Shortfall | None:
    """Why ``phase`` cannot be placed on ``nodes`` — a resource whose total exceeds the cluster's, else a bundle that
    finds no node — or None."""
    for resource in phase.resources():
        needed, available = phase.total(resource), cluster_total(nodes, resource)
        if needed > available:
            return Shortfall(phase, resource, needed, available)
    stranded = fits(phase.claims, nodes)
    if stranded is None:
        return None
    resource = next((k for k in stranded.bundle if k == "GPU"), next(iter(stranded.bundle)))
    return Shortfall(phase, resource, phase.total(resource), cluster_total(nodes, resource), stranded.holder)


def balance(phases: Sequence[Phase], nodes: Sequence[Resources]) -> list[Shortfall]:
    """Every phase that does not fit ``nodes``, in the order the run reaches them."""
    return [found for phase in phases if (found := shortfall(phase, nodes)) is not None]


def peak(phases: Sequence[Phase], resource: str) -> tuple[float, Phase | None]:
    """The most of ``resource`` any phase holds, and the first phase that holds it."""
    best: tuple[float, Phase | None] = (0.0, None)
    for phase in phases:
        if phase.total(resource) > best[0]:
            best = (phase.total(resource), phase)
    return best


def _number(value: float) -> str:
    return f"{value:g}"
