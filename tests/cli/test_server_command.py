"""``recipe server --port N``: the Prefect UI it serves calls the API on N (not Prefect's default 4200), unless the user
pointed it elsewhere. No server starts here: the command's ``execve`` is replaced by a recorder."""

from __future__ import annotations

import os

import pytest

from cli.commands.server import server_environment
from cli.main import main

UI_NAMES = ("PREFECT_UI_API_URL", "PREFECT_SERVER_UI_API_URL")


def test_the_ui_and_clients_call_the_chosen_port() -> None:
    env = server_environment({"PATH": "/bin"}, "127.0.0.1", 4321)
    assert env == {
        "PATH": "/bin",
        "PREFECT_UI_API_URL": "http://127.0.0.1:4321/api",
        "PREFECT_API_URL": "http://127.0.0.1:4321/api",
    }


@pytest.mark.parametrize("name", UI_NAMES)
def test_a_ui_api_url_the_user_set_is_kept(name: str) -> None:
    proxy = "https://proxy.example/api"
    env = server_environment({name: proxy}, "127.0.0.1", 4321)
    assert {n: env.get(n) for n in UI_NAMES} == {n: proxy if n == name else None for n in UI_NAMES}


def test_a_users_api_url_is_kept_and_an_empty_one_is_unset() -> None:
    assert server_environment({"PREFECT_API_URL": "http://elsewhere/api"}, "h", 1)["PREFECT_API_URL"] == (
        "http://elsewhere/api"
    )
    env = server_environment({"PREFECT_API_URL": "", "PREFECT_UI_API_URL": ""}, "h", 1)
    assert env["PREFECT_API_URL"] == env["PREFECT_UI_API_URL"] == "http://h:1/api"


def test_recipe_server_starts_prefect_with_the_ports_api_url(monkeypatch, capsys) -> None:
    for name in (*UI_NAMES, "PREFECT_API_URL"):
        monkeypatch.delenv(name, raising=False)
    started: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(os, "execve", lambda path, argv, env: started.append((path, argv, env)))
    assert main(["server", "--port", "4321"]) == 0
    [(_, argv, env)] = started
    assert argv[1:] == ["server", "start", "--host", "127.0.0.1", "--port", "4321"]
    assert env["PREFECT_UI_API_URL"] == env["PREFECT_API_URL"] == "http://127.0.0.1:4321/api"
    assert "export PREFECT_API_URL=http://127.0.0.1:4321/api" in capsys.readouterr().out


def test_recipe_server_says_when_the_ui_calls_another_api(monkeypatch, capsys) -> None:
    monkeypatch.setenv("PREFECT_UI_API_URL", "https://proxy.example/api")
    monkeypatch.setattr(os, "execve", lambda path, argv, env: None)
    assert main(["server", "--port", "4321"]) == 0
    assert "the UI calls the API at https://proxy.example/api" in capsys.readouterr().out


def test_port_0_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["server", "--port", "0"])
    assert exit_.value.code == 2 and "a port from 1 to 65535" in capsys.readouterr().err
