"""A world's own MCP servers as one tool session and as the sandbox's gateway: real third-party servers
(mcp-server-git and -sqlite from PyPI, the reference filesystem server from npm), and a broken fixture server."""

import asyncio
import time
from pathlib import Path

import pytest

from envs.byo.servers import ExternalTools, ServerGoneError, ServerStartError
from envs.byo.spec import server_set_of
from envs.harness.tools import GatewayToolSession, LocalToolSession, tool_session
from envs.mcp.client import GatewayClient, gateway_command
from tests.envs.byo.environments import FIXTURE_SERVER, environment, example, servers_installed  # noqa: F401


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture(scope="module")
def git_world(tmp_path_factory) -> Path:
    return example("git-history", tmp_path_factory.mktemp("data")) / "worlds" / "repo-1"


async def _session_checks(world: Path) -> None:
    async with ExternalTools(server_set_of(world), world) as tools:
        names = [tool["name"] for tool in await tools.list_tools()]
        assert names == ["git_git_status", "git_git_log", "git_git_branch", "git_git_show"]  # the file's order
        log = await tools.call("git_git_log", {"repo_path": ".", "max_count": 1})
        assert not log.is_error and "Author: Grace Hopper" in log.text and "Rewrite due diligence checklist" in log.text
        unknown = await tools.call("git_git_commit", {"repo_path": "."})  # listed by the server, not offered
        assert unknown.is_error and "unknown tool 'git_git_commit'" in unknown.text and "git_git_log" in unknown.text
        bad_ref = await tools.call("git_git_show", {"repo_path": ".", "revision": "nope"})
        assert bad_ref.is_error and not bad_ref.timed_out and "nope" in bad_ref.text
        bad_type = await tools.call("git.git_log", {"repo_path": 3})  # an oracle step's <server>.<tool> name
        assert bad_type.is_error and "repo_path" in bad_type.text


def test_a_worlds_servers_are_one_session_with_namespaced_tools(git_world: Path) -> None:
    run(_session_checks(git_world))
    assert isinstance(tool_session(git_world), ExternalTools)
    assert isinstance(tool_session(git_world.parents[3] / "nowhere"), LocalToolSession)  # the project's own worlds


async def _through_gateway(world: Path) -> tuple[list[str], str]:
    async with GatewayClient.for_command(gateway_command(world), cwd=world) as client:
        names = [tool["name"] for tool in await GatewayToolSession(client).list_tools()]
        outcome = await client.call("git_git_branch", {"repo_path": ".", "branch_type": "local"})
    return names, outcome.text


def test_the_sandbox_gateway_forwards_to_the_worlds_servers(git_world: Path) -> None:
    names, text = run(_through_gateway(git_world))
    assert "git_git_branch" in names and text == "* main\n  review-1"


async def _one_call(world: Path, tool: str, args: dict) -> str:
    async with ExternalTools(server_set_of(world), world) as tools:
        outcome = await tools.call(tool, args)
    assert not outcome.is_error, outcome.text
    return outcome.text


def test_the_sqlite_and_filesystem_servers_answer_from_the_world(tmp_path: Path) -> None:
    sales = example("sqlite-sales", tmp_path / "data") / "worlds" / "sales-1"
    assert "7" in run(_one_call(sales, "db_read_query", {"query": "SELECT count(*) AS n FROM orders"}))
    notes = example("notes-folder", tmp_path / "data") / "worlds" / "notes-2"
    assert "Owner: Alan Turing" in run(_one_call(notes, "files_read_text_file", {"path": "meeting.txt"}))


def fixture_world(tmp_path: Path, **server) -> Path:
    from envs.byo.build import byo_environment_build

    spec = {"name": "broken", "command": FIXTURE_SERVER, "timeout_s": 1} | server
    return byo_environment_build(environment(tmp_path / "env", [spec]), tmp_path / "data") / "worlds" / "w1"


async def _hang_then_echo(world: Path) -> tuple[object, object]:
    async with ExternalTools(server_set_of(world), world) as tools:
        late = await tools.call("broken_hang", {})  # the tool sleeps an hour: only the 1 s call timeout ends it
        after = await tools.call("broken_echo", {"text": "still here"})
    return late, after


def test_a_call_past_its_timeout_is_a_timed_out_outcome_and_the_server_keeps_serving(tmp_path: Path) -> None:
    late, after = run(_hang_then_echo(fixture_world(tmp_path)))
    assert late.timed_out and late.is_error and "no answer within the 1 s call timeout" in late.text
    assert late.latency_s >= 1.0  # the call's record holds the time it waited (the catalog's latency column)
    assert after.text == "still here"


async def _hang_through_gateway(world: Path):
    async with GatewayClient.for_command(gateway_command(world), cwd=world) as client:
        return await client.call("broken_hang", {})


def test_the_gateway_passes_a_servers_timeout_on_as_a_timeout(tmp_path: Path) -> None:
    outcome = run(_hang_through_gateway(fixture_world(tmp_path)))
    assert outcome.timed_out and "broken_hang" in outcome.text


async def _die(world: Path) -> None:
    async with ExternalTools(server_set_of(world), world) as tools:
        await tools.call("broken_die", {})


def test_a_server_that_exits_mid_rollout_is_an_infra_failure(tmp_path: Path) -> None:
    with pytest.raises(ServerGoneError, match="MCP server broken closed during broken_die"):
        run(_die(fixture_world(tmp_path)))


async def _open(world: Path) -> None:
    async with ExternalTools(server_set_of(world), world):
        pass


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"command": ["mcp-server-gti"]}, "MCP server broken: command 'mcp-server-gti' not found"),
        ({"secrets": {"TOKEN": "RL_RECIPE_TEST_UNSET"}}, "secret TOKEN reads host variable RL_RECIPE_TEST_UNSET"),
        ({"command": ["python3", "-c", "import sys; sys.exit(3)"]}, "MCP server broken: did not start"),
        ({"tools": ["echo", "ecko"]}, "lists no tool 'ecko'; did you mean echo"),
    ],
)
def test_a_server_that_cannot_start_is_named(tmp_path: Path, server: dict, message: str) -> None:
    with pytest.raises(ServerStartError, match=message) as caught:
        run(_open(fixture_world(tmp_path, **server)))
    assert caught.value.server == "broken"


@pytest.fixture
def http_server(tmp_path: Path):
    import socket
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([*FIXTURE_SERVER, "--port", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as attempt:
            if attempt.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait(timeout=10)


def test_a_loopback_http_server_is_reached_with_the_same_timeouts(tmp_path: Path, http_server: str) -> None:
    world = fixture_world(tmp_path, command=None, url=http_server)
    late, after = run(_hang_then_echo(world))
    assert late.timed_out and late.latency_s >= 1.0 and after.text == "still here"
