"""Synthetic company worlds (investment banking, management consulting, corporate law) and their ground truth.

``generate_worlds(dest_root, seed)`` writes ib-1..3, mc-1..3 and law-1..3 (world 3 of each domain is held out; with
``world_ids(n)``, worlds 4..n of each domain are more train worlds) and returns a ``WorldFacts`` per world for the
task generators.
"""

from envs.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "envs.worlds.facts": ["CellFact", "PdfFacts", "TextFact", "WorldFacts"],
        "envs.worlds.generate": [
            "WORLD_IDS",
            "generate_world",
            "generate_worlds",
            "is_heldout_world",
            "world_ids",
            "world_index",
        ],
    },
)
