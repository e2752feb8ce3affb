"""LlmJudgeClient against a real local HTTP server whose replies are scripted request by request."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import SecretStr, ValidationError

from envs.graders import JudgeVerdict
from envs.judge import JudgeConfig, JudgeError, LlmJudgeClient, parse_verdict
from envs.openai_http import ApiFailure, backoff_delay_s, classify_status, parse_retry_after

KEYS = ["sk-alpha-0001", "sk-bravo-0002", "sk-charlie-0003"]
VALID = '{"passed": true, "reason": "revenue stated"}'


@dataclass(frozen=True)
class Reply:
    """One scripted reply: a chat completion with ``content`` unless ``status`` or ``raw`` say otherwise."""

    content: str = VALID
    status: int = 200
    raw: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class ScriptedServer:
    """Serves ``script`` in order (the last reply repeats) or asks it for each request body; records headers, bodies
    and peak concurrency."""

    def __init__(self, script: list[Reply] | Callable[[dict], Reply]) -> None:
        self.script = script
        self.auth_headers: list[str | None] = []
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    index = len(server.bodies)
                    server.bodies.append(body)
                    server.auth_headers.append(self.headers.get("Authorization"))
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                script = server.script
                reply = script(body) if callable(script) else script[min(index, len(script) - 1)]
                try:
                    time.sleep(reply.delay_s)
                    payload = reply.raw if reply.raw is not None else _completion(reply.content)
                    data = payload.encode()
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a slow reply, as the timeout test intends
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(content: str) -> str:
    return json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    )


@pytest.fixture
def serve() -> Iterator:
    servers: list[ScriptedServer] = []
    clients: list[LlmJudgeClient] = []

    def start(script: list[Reply] | Callable[[dict], Reply], **config: object) -> tuple[ScriptedServer, LlmJudgeClient]:
        server = ScriptedServer(script)
        servers.append(server)
        defaults: dict[str, object] = {
            "base_url": server.url,
            "model": "judge-model",
            "api_keys": [SecretStr(KEYS[0])],
            "timeout_s": 2.0,
            "max_attempts": 4,
            "backoff_base_s": 0.001,
            "backoff_max_s": 0.01,
        }
        client = LlmJudgeClient(JudgeConfig(**{**defaults, **config}), rng=random.Random(0))
        clients.append(client)
        return server, client

    yield start
    for client in clients:
        client.close()
    for server in servers:
        server.close()


def _judge(client: LlmJudgeClient) -> JudgeVerdict:
    return client.judge("What is FY2025 revenue?", "States revenue of 412.5", "412.5", "Model!C5 = 412.5")


# --- retries ---------------------------------------------------------------------------------------------------------


def test_429_with_retry_after_waits_then_succeeds(serve) -> None:
    server, client = serve([Reply(status=429, raw="{}", headers={"Retry-After": "0.3"}), Reply()], backoff_max_s=5)
    started = time.monotonic()
    assert _judge(client) == JudgeVerdict(passed=True, reason="revenue stated")
    assert time.monotonic() - started >= 0.3  # the header, not the 10 ms jitter, set the wait
    metrics = client.metrics()
    assert (metrics.attempts, metrics.retries_by_class) == (2, {ApiFailure.RATE_LIMITED: 1})
    assert len(server.bodies) == 2


def test_retry_after_is_capped_by_backoff_max(serve) -> None:
    _, client = serve([Reply(status=429, raw="{}", headers={"Retry-After": "120"}), Reply()], backoff_max_s=0.05)
    started = time.monotonic()
    assert _judge(client).passed
    assert time.monotonic() - started < 2.0


def test_500_then_success(serve) -> None:
    server, client = serve([Reply(status=500, raw="oops"), Reply(status=503, raw="busy"), Reply()])
    assert _judge(client).passed
    assert client.metrics().retries_by_class == {ApiFailure.SERVER_ERROR: 2}
    assert len(server.bodies) == 3


def test_slow_reply_times_out_then_success(serve) -> None:
    _, client = serve([Reply(delay_s=1.5), Reply()], timeout_s=0.3)
    started = time.monotonic()
    assert _judge(client).passed
    assert time.monotonic() - started < 1.2  # did not wait for the slow reply
    assert client.metrics().retries_by_class == {ApiFailure.TIMEOUT: 1}


def test_connection_refused_exhausts_attempts() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = JudgeConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_attempts=3, backoff_base_s=0.001, backoff_max_s=0.01
    )
    with LlmJudgeClient(config) as client, pytest.raises(JudgeError) as info:
        _judge(client)
    assert (info.value.failure, info.value.attempts) == (ApiFailure.CONNECTION, 3)
    assert client.metrics().retries_by_class == {ApiFailure.CONNECTION: 2}
    assert client.metrics().failures_by_class == {ApiFailure.CONNECTION: 1}


# --- malformed replies -----------------------------------------------------------------------------------------------


def test_malformed_reply_is_reasked_then_valid(serve) -> None:
    server, client = serve([Reply(content="I think it passes."), Reply(content=f"Sure:\n```json\n{VALID}\n```")])
    assert _judge(client) == JudgeVerdict(passed=True, reason="revenue stated")
    first, second = server.bodies
    assert len(first["messages"]) == 2
    # the re-ask carries the bad reply and a correction
    assert second["messages"][2] == {"role": "assistant", "content": "I think it passes."}
    assert second["messages"][3]["role"] == "user" and "JSON" in second["messages"][3]["content"]
    assert first["temperature"] == 0.0 and first["model"] == "judge-model"


def test_malformed_every_time_raises_after_max_attempts(serve) -> None:
    server, client = serve([Reply(content='{"passed": "yes", "reason": "x"}')], max_attempts=3)
    with pytest.raises(JudgeError) as info:
        _judge(client)
    assert (info.value.failure, info.value.attempts, len(server.bodies)) == (ApiFailure.MALFORMED_RESPONSE, 3, 3)


def test_body_that_is_not_a_chat_completion_is_malformed(serve) -> None:
    _, client = serve([Reply(raw="<html>gateway</html>"), Reply(raw='{"choices": []}'), Reply()])
    assert _judge(client).passed
    assert client.metrics().retries_by_class == {ApiFailure.MALFORMED_RESPONSE: 2}


# --- not retried -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "failure"), [(401, ApiFailure.AUTH), (403, ApiFailure.AUTH), (400, ApiFailure.BAD_REQUEST)]
)
def test_client_errors_are_not_retried(serve, status: int, failure: ApiFailure) -> None:
    server, client = serve([Reply(status=status, raw='{"error": "no"}'), Reply()])
    with pytest.raises(JudgeError) as info:
        _judge(client)
    assert (info.value.failure, info.value.attempts, len(server.bodies)) == (failure, 1, 1)
    assert not failure.retryable


# --- keys ------------------------------------------------------------------------------------------------------------


def test_keys_rotate_round_robin_and_never_leak(serve, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    # 429 twice (rotated away), success, then a 401 whose body echoes the key, as some providers do.
    script = [
        Reply(status=429, raw="{}"),
        Reply(status=429, raw="{}"),
        Reply(),
        # padded so that the echoed key straddles the 300-character quote limit
        Reply(status=401, raw=json.dumps({"error": f"{'.' * 256}Incorrect API key provided: {KEYS[0]}"})),
    ]
    server, client = serve(script, api_keys=[SecretStr(k) for k in KEYS])
    assert _judge(client).passed
    with pytest.raises(JudgeError) as info:
        _judge(client)
    assert server.auth_headers == [f"Bearer {KEYS[i]}" for i in (0, 1, 2, 0)]
    texts = [str(info.value), repr(info.value), info.value.message, repr(client), repr(client.config)]
    texts += [str(client.config), client.config.model_dump_json(), client.metrics().model_dump_json()]
    texts += [record.getMessage() for record in caplog.records]
    assert "***" in str(info.value)  # the echoed key was redacted, not dropped
    assert any("401" in record.getMessage() for record in caplog.records)
    for key in KEYS:
        assert all(key[:6] not in text for text in texts)  # not even the start of a key


def test_keys_from_env_var(monkeypatch) -> None:
    monkeypatch.setenv("TEST_JUDGE_KEYS", f" {KEYS[1]} ,{KEYS[2]},")
    config = JudgeConfig(
        base_url="http://x/v1", model="m", api_key_env="TEST_JUDGE_KEYS", api_keys=[SecretStr(KEYS[0])]
    )
    assert [key.get_secret_value() for key in config.resolve_keys()] == KEYS
    assert all(key not in config.model_dump_json() + repr(config) for key in KEYS)


def test_missing_env_var_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv("TEST_JUDGE_MISSING", raising=False)
    with pytest.raises(ValueError, match="TEST_JUDGE_MISSING"):
        LlmJudgeClient(JudgeConfig(base_url="http://x/v1", model="m", api_key_env="TEST_JUDGE_MISSING"))


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValidationError, match="max_concurrency"):
        JudgeConfig(base_url="http://x/v1", model="m", max_concurrency=0)
    with pytest.raises(ValidationError, match="extra"):
        JudgeConfig(base_url="http://x/v1", model="m", api_key="sk-nope")


def test_no_keys_sends_no_authorization(serve) -> None:
    server, client = serve([Reply()], api_keys=[])
    assert _judge(client).passed
    assert server.auth_headers == [None]


# --- concurrency and the sync/async surfaces -------------------------------------------------------------------------


def test_concurrency_limit_is_respected(serve) -> None:
    server, client = serve([Reply(delay_s=0.15)], max_concurrency=2)
    criteria = [f"criterion {i}" for i in range(6)]
    verdicts = client.judge_criteria("task", criteria, "answer", "evidence")
    assert verdicts == [JudgeVerdict(passed=True, reason="revenue stated")] * 6
    assert server.peak_in_flight == 2  # reached the limit, never passed it
    assert sorted(_criterion_of(body) for body in server.bodies) == criteria


def _criterion_of(body: dict) -> str:
    return body["messages"][1]["content"].split("## Criterion\n")[1].split("\n")[0]


def test_judge_criteria_keeps_order(serve) -> None:
    # each reply names its criterion; the first is slowest, so replies arrive out of order
    def reply_for(body: dict) -> Reply:
        criterion = _criterion_of(body)
        return Reply(content=json.dumps({"passed": True, "reason": criterion}), delay_s=0.2 if criterion == "a" else 0)

    server, client = serve(reply_for, max_concurrency=4)
    verdicts = client.judge_criteria("task", ["a", "b", "c"], None, "")
    assert [verdict.reason for verdict in verdicts] == ["a", "b", "c"]
    assert all("(no final answer)" in body["messages"][1]["content"] for body in server.bodies)


def test_judge_criteria_raises_the_failure(serve) -> None:
    _, client = serve([Reply(), Reply(status=401, raw="{}")], max_concurrency=1)
    with pytest.raises(JudgeError) as info:
        client.judge_criteria("task", ["a", "b"], "x", "")
    assert info.value.failure is ApiFailure.AUTH


def test_sync_judge_works_inside_a_running_loop_and_async_api(serve) -> None:
    _, client = serve([Reply(content='{"passed": false, "reason": "wrong number"}')])

    async def main() -> tuple[JudgeVerdict, JudgeVerdict, list[JudgeVerdict]]:
        sync_inside_loop = _judge(client)
        async_one = await client.judge_async("task", "criterion", "answer", "evidence")
        async_many = await client.judge_criteria_async("task", ["a", "b"], "answer", "evidence")
        return sync_inside_loop, async_one, async_many

    expected = JudgeVerdict(passed=False, reason="wrong number")
    assert asyncio.run(main()) == (expected, expected, [expected, expected])
    metrics = client.metrics()
    assert (metrics.calls, metrics.succeeded, metrics.attempts) == (4, 4, 4)
    assert metrics.latency_max_s is not None and metrics.latency_max_s >= metrics.latency_p50_s > 0


def test_closed_client_refuses_calls(serve) -> None:
    _, client = serve([Reply()])
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        _judge(client)


# --- pure helpers ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (VALID, JudgeVerdict(True, "revenue stated")),
        ('```json\n{"passed": false, "reason": "no"}\n```', JudgeVerdict(False, "no")),
        ('Verdict {draft} then {"reason": "ok", "passed": true}', JudgeVerdict(True, "ok")),
        ('{"note": {"passed": true, "reason": "nested"}}', JudgeVerdict(True, "nested")),
        ('{"passed": "true", "reason": "string bool"}', None),
        ('{"passed": 1, "reason": "int bool"}', None),
        ('{"passed": true}', None),
        ("passed: true", None),
        ("", None),
    ],
)
def test_parse_verdict(content: str, expected: JudgeVerdict | None) -> None:
    assert parse_verdict(content) == expected


def test_classify_status() -> None:
    assert [classify_status(code) for code in (200, 400, 401, 403, 404, 408, 429, 500, 502)] == [
        None,
        ApiFailure.BAD_REQUEST,
        ApiFailure.AUTH,
        ApiFailure.AUTH,
        ApiFailure.BAD_REQUEST,
        ApiFailure.TIMEOUT,
        ApiFailure.RATE_LIMITED,
        ApiFailure.SERVER_ERROR,
        ApiFailure.SERVER_ERROR,
    ]


def test_parse_retry_after() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    # HTTP-date 2015-10-21 07:28:00 GMT is 1445412480 s after the epoch; "now" 30 s before it
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412450.0) == 30.0


def test_backoff_full_jitter_bounds() -> None:
    rng = random.Random(1)
    # retry 3 with base 0.5: min(4.0, 0.5 * 2**3) = 4.0 is the ceiling; retry 10 is capped at 4.0 too
    draws = [backoff_delay_s(3, 0.5, 4.0, rng) for _ in range(200)] + [backoff_delay_s(10, 0.5, 4.0, rng)]
    assert all(0.0 <= d <= 4.0 for d in draws)
    assert max(draws) > 3.0  # the upper part of the range is reached: jitter spans [0, cap], not a constant
    assert all(0.0 <= backoff_delay_s(0, 0.5, 4.0, rng) <= 0.5 for _ in range(50))


def test_judge_error_pickles() -> None:
    error = pickle.loads(pickle.dumps(JudgeError(ApiFailure.TIMEOUT, "no reply within 1s", 3)))
    assert (error.failure, error.message, error.attempts) == (ApiFailure.TIMEOUT, "no reply within 1s", 3)
    assert str(error) == "[timeout] no reply within 1s (after 3 attempt(s))"
