import pytest

from trainer.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    POLICY_LOSSES,
    AdvantageEstimator,
    Aggregation,
    PolicyLoss,
    Registry,
)


def test_register_and_get():
    registry: Registry[int] = Registry("number")
    registry.register("one")(1)
    registry.register("two")(2)
    assert registry.get("one") == 1
    assert "two" in registry
    assert registry.names() == ["one", "two"]


def test_unknown_name_lists_known_names():
    registry: Registry[int] = Registry("number")
    registry.register("one")(1)
    with pytest.raises(KeyError, match=r"unknown number 'three'; known: one"):
        registry.get("three")


def test_duplicate_registration_is_refused():
    registry: Registry[int] = Registry("number")
    registry.register("one")(1)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("one")(2)


@pytest.mark.parametrize(
    ("registry", "options"),
    [(ADVANTAGE_ESTIMATORS, AdvantageEstimator), (AGGREGATIONS, Aggregation), (POLICY_LOSSES, PolicyLoss)],
)
def test_every_option_is_registered(registry, options):
    # A StrEnum key and its plain string find the same entry.
    assert registry.names() == sorted(option.value for option in options)
    for option in options:
        assert registry.get(option) is registry.get(option.value)
