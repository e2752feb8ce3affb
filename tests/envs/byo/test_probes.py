"""Schema probes: arguments from a tool's input schema, and which probes count as known-good."""

from envs.byo.probes import PLACEHOLDERS, planned_probes, schema_arguments
from envs.byo.spec import ProbeSpec, ServerSet, ServerSpec, UserProbe

SCHEMA = {
    "type": "object",
    "properties": {
        "repo_path": {"type": "string"},
        "max_count": {"type": "integer", "default": 10},
        "branch_type": {"type": "string", "enum": ["local", "remote"]},
        "revision": {"type": "string", "examples": ["HEAD~1"]},
        "note": {"type": "string"},
    },
    "required": ["repo_path", "max_count", "branch_type", "revision"],
}


def test_required_arguments_come_from_known_values_default_enum_and_examples() -> None:
    args, complete = schema_arguments(SCHEMA, {"repo_path": ".", "unrelated": 1})
    assert args == {"repo_path": ".", "max_count": 10, "branch_type": "local", "revision": "HEAD~1"}
    assert complete


def test_a_known_value_fills_an_optional_argument_too() -> None:
    args, _ = schema_arguments(SCHEMA, {"repo_path": ".", "note": "hi"})
    assert args["note"] == "hi"


def test_a_required_argument_nothing_fills_gets_a_placeholder_and_the_probe_is_not_known_good() -> None:
    schema = {"properties": {"n": {"type": "integer"}, "s": {"anyOf": [{"type": "null"}, {"type": "number"}]}}}
    args, complete = schema_arguments(schema | {"required": ["n", "s"]}, {})
    assert args == {"n": PLACEHOLDERS["integer"], "s": PLACEHOLDERS["number"]} and not complete
    assert schema_arguments({"type": "object"}, {}) == ({}, True)


def test_user_probes_come_first_then_one_schema_probe_per_tool() -> None:
    servers = ServerSet(
        environment="mine",
        servers=(ServerSpec(name="git", command=("mcp-server-git",)),),
        probes=ProbeSpec(arguments={"repo_path": "."}, calls=(UserProbe(tool="git_log", expect="commit"),)),
    )
    listing = [
        {"name": "git_git_status", "input_schema": {"properties": {"repo_path": {}}, "required": ["repo_path"]}},
        {"name": "git_git_show", "input_schema": {"properties": {"revision": {}}, "required": ["revision"]}},
    ]
    probes = planned_probes(servers, listing)
    assert [(p.tool, p.args, p.known_good, p.expect) for p in probes] == [
        ("git_git_log", {}, True, "commit"),
        ("git_git_status", {"repo_path": "."}, True, None),
        ("git_git_show", {"revision": "probe"}, False, None),
    ]
