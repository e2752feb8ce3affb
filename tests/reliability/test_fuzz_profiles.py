"""Fuzzing the profile loader with what a mistyped or broken profile holds: arbitrary bytes, arbitrary YAML documents,
shipped profiles with any field changed, and arbitrary ``--set KEY=VALUE`` overrides. The contract: a ``RecipeConfig``
or one ``ProfileError`` (which the CLI prints as one line) — never a raw traceback.

The tests at the end pin the crashes this suite found (each once escaped as a raw exception) with minimal inputs."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from flows.config import PROFILES_DIR, ProfileError, RecipeConfig, load_profile

SMOKE = PROFILES_DIR / "smoke.yaml"
SMOKE_RAW: dict[str, Any] = yaml.safe_load(SMOKE.read_text())


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}{key}.")] or [prefix]


SMOKE_KEYS = sorted(leaf.rstrip(".") for leaf in _leaves(SMOKE_RAW))
SECTIONS = sorted({key.rsplit(".", 1)[0] for key in SMOKE_KEYS if "." in key})

YAML_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.dates(),
    st.datetimes(),
    st.sampled_from(["local", "toy", "bootstrap", "ib-1", "-1", "1e400", ".nan", "~", "", "yes", "0x10"]),
)
YAML_VALUES = st.recursive(
    YAML_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=8), YAML_SCALARS), children, max_size=3),
    ),
    max_leaves=10,
)
YAML_FRAGMENTS = st.sampled_from(
    [
        "profile: smoke\n",
        "stages:\n",
        "  overfit:\n",
        "    steps: 3\n",
        "- ",
        ": ",
        "&a ",
        "*a",
        "*b",
        "<<: *a\n",
        "!!python/object:os.system ",
        "!!binary ",
        "!!set ",
        "!!timestamp ",
        "!!int ",
        "!!float ",
        "!!bool ",
        "? ",
        "|\n",
        ">-\n",
        "---\n",
        "...\n",
        "%YAML 1.1\n",
        "\t",
        "\x00",
        "\ufeff",
        "\u2028",
        "{",
        "}",
        "[",
        "]",
        '"',
        "'",
        "#",
        "9" * 5000,
        "[" * 300,
        "2020-01-01",
        "\n",
        "  ",
    ]
)
YAML_TEXT = st.lists(st.one_of(YAML_FRAGMENTS, st.text(max_size=10)), max_size=25).map("".join)


def _set(raw: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``raw`` with the leaf ``dotted`` set to ``value`` (unchanged when a parent is no longer a section)."""
    *parents, leaf = dotted.split(".")
    result = yaml.safe_load(yaml.safe_dump(raw))
    node = result
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):  # an earlier change may have replaced a parent section with a scalar
        node[leaf] = value
    return result


MUTATED_SMOKE = st.builds(
    lambda changes: _mutate(changes), st.lists(st.tuples(st.sampled_from(SMOKE_KEYS), YAML_VALUES), max_size=3)
)


def _mutate(changes: list[tuple[str, Any]]) -> dict[str, Any]:
    raw = SMOKE_RAW
    for key, value in changes:
        raw = _set(raw, key, value)
    return raw


def check(document: bytes, overrides: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-profiles-") as folder:
        path = Path(folder) / "profile.yaml"
        path.write_bytes(document)
        try:
            config = load_profile(path, overrides)
        except ProfileError as error:
            event("refused")
            assert str(error)
            return
    event("loaded")
    assert isinstance(config, RecipeConfig)


@given(st.binary())
def test_arbitrary_bytes_are_a_profile_or_a_profile_error(document: bytes) -> None:
    check(document, [])


@given(YAML_TEXT)
def test_near_miss_yaml_is_a_profile_or_a_profile_error(text: str) -> None:
    check(text.encode("utf-8", errors="surrogatepass"), [])


@given(st.one_of(YAML_VALUES, MUTATED_SMOKE))
def test_any_yaml_document_is_a_profile_or_a_profile_error(document: Any) -> None:
    check(yaml.safe_dump(document, allow_unicode=True).encode("utf-8", errors="surrogatepass"), [])


OVERRIDE_KEYS = st.one_of(
    st.sampled_from(SMOKE_KEYS),
    st.sampled_from(SECTIONS).map(lambda section: f"{section}.new_key"),
    st.sampled_from(["", " ", ".", "..", "a..b", "profile.x", "stages", "stages.overfit.steps.x"]),
    st.text(max_size=12),
)
OVERRIDE_VALUES = st.one_of(
    YAML_VALUES.map(lambda value: yaml.safe_dump(value, default_flow_style=True).strip()),
    YAML_TEXT,
    st.text(max_size=20),
)
OVERRIDES = st.one_of(
    st.builds(lambda key, value: f"{key}={value}", OVERRIDE_KEYS, OVERRIDE_VALUES),
    st.text(max_size=30),
)


@given(st.lists(OVERRIDES, max_size=4), st.sampled_from(sorted(PROFILES_DIR.glob("*.yaml"))))
def test_any_override_of_a_shipped_profile_is_a_profile_or_a_profile_error(overrides: list[str], profile: Path) -> None:
    check(profile.read_bytes(), overrides)


@given(st.one_of(YAML_VALUES, YAML_TEXT), st.lists(OVERRIDES, min_size=1, max_size=3))
def test_overrides_of_any_document_are_a_profile_or_a_profile_error(document: Any, overrides: list[str]) -> None:
    text = document if isinstance(document, str) else yaml.safe_dump(document, allow_unicode=True)
    check(text.encode("utf-8", errors="surrogatepass"), overrides)


# --- the crashes found, minimal inputs ------------------------------------


def _load(tmp_path: Path, document: bytes, overrides: list[str]) -> None:
    path = tmp_path / "profile.yaml"
    path.write_bytes(document)
    with pytest.raises(ProfileError):
        load_profile(path, overrides)


SMOKE_BYTES = SMOKE.read_bytes()


def test_a_profile_that_is_not_utf8_is_a_profile_error(tmp_path: Path) -> None:
    _load(tmp_path, b"\xff", [])


@pytest.mark.parametrize(("document", "override"), [(b"- 1\n", "a=1"), (b"5\n", "a=1"), (b"5\n", "a.b=1")])
def test_an_override_of_a_profile_that_is_no_mapping_is_a_profile_error(
    tmp_path: Path, document: bytes, override: str
) -> None:
    _load(tmp_path, document, [override])


def test_a_date_key_is_a_profile_error(tmp_path: Path) -> None:
    _load(tmp_path, b"2020-01-01: 1\n", [])


def test_a_self_referencing_alias_is_a_profile_error(tmp_path: Path) -> None:
    _load(tmp_path, b"a: &x [*x]\n", [])


@pytest.mark.parametrize(("document", "overrides"), [(b"[" * 5000, []), (SMOKE_BYTES, ["seed=" + "[" * 5000])])
def test_deep_nesting_is_a_profile_error(tmp_path: Path, document: bytes, overrides: list[str]) -> None:
    _load(tmp_path, document, overrides)


@pytest.mark.parametrize(
    ("document", "overrides"), [(b"seed: " + b"9" * 5000, []), (SMOKE_BYTES, ["seed=" + "9" * 5000])]
)
def test_a_huge_integer_is_a_profile_error(tmp_path: Path, document: bytes, overrides: list[str]) -> None:
    _load(tmp_path, document, overrides)


@pytest.mark.parametrize("document", [b"!!timestamp x", b"!!int x", b"!!float x", b"!!bool x", b"!!int ''"])
def test_a_value_its_explicit_tag_does_not_fit_is_a_profile_error(tmp_path: Path, document: bytes) -> None:
    _load(tmp_path, document, [])


def test_a_billion_laughs_profile_is_refused_without_expanding_it(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 leaves once expanded
    _load(tmp_path, "\n".join(levels).encode(), [])
