"""Ray Jobs submission against a stub client: log following (stream and poll), timeouts, the job's command."""

import shlex
import time

import pytest

from trainer.skyrl.submit import SubmitError, _bounded, connect, entrypoint, follow_job, runtime_env

LOG = "[dry run] Step 1:\n{'generate/batch_num_seq': 256, 'timing/step': 0.5, 'trainer/global_step': 1}\n"


class StubClient:
    """Answers like ``JobSubmissionClient``: the job runs for ``polls`` status calls, then ends with ``final``."""

    def __init__(self, polls: int = 2, final: str = "SUCCEEDED") -> None:
        self.calls, self.polls, self.final, self.stopped = 0, polls, final, False

    def get_job_status(self, job_id: str) -> str:
        self.calls += 1
        if self.stopped:
            return "STOPPED"
        return self.final if self.calls > self.polls else "RUNNING"

    def get_job_logs(self, job_id: str) -> str:
        return LOG if self.calls > self.polls else ""

    def stop_job(self, job_id: str) -> bool:
        self.stopped = True
        return True

    async def tail_job_logs(self, job_id: str):
        yield LOG


@pytest.mark.parametrize("stream", [False, True])
def test_following_a_job_to_its_end_reads_the_metric_rows(stream: bool) -> None:
    shown: list[str] = []
    outcome = follow_job(StubClient(), "job-1", timeout_s=30, echo=shown.append, stream=stream, run="dry")
    assert outcome.succeeded and outcome.status == "SUCCEEDED" and outcome.logs == LOG
    assert outcome.rows == [
        {"stage": "hero", "run": "dry", "step": 1, "wall_s": 0.5, "trajectories": 256, "trained": False}
    ]
    assert "".join(shown) == LOG


def test_a_job_past_its_timeout_is_stopped() -> None:
    client = StubClient(polls=10**9)
    started = time.monotonic()
    outcome = follow_job(client, "job-2", timeout_s=1.5, stream=False)
    assert outcome.status == "TIMEOUT" and client.stopped and time.monotonic() - started < 10


def test_a_failed_job_is_reported() -> None:
    assert follow_job(StubClient(final="FAILED"), "job-3", timeout_s=30, stream=False).status == "FAILED"


def test_a_call_that_hangs_is_bounded() -> None:
    with pytest.raises(SubmitError, match=r"within 0\.2 s"):
        _bounded(lambda: time.sleep(5), 0.2, "slow call")
    with pytest.raises(SubmitError, match="ValueError: nope"):
        _bounded(lambda: (_ for _ in ()).throw(ValueError("nope")), 5, "bad call")


def test_the_job_command_and_runtime_env() -> None:
    command = entrypoint("trainer.skyrl.dryrun", ["a.b=[0.9,0.98]", "c=x y"], python="/opt/py")
    assert shlex.split(command) == ["/opt/py", "-m", "trainer.skyrl.dryrun", "a.b=[0.9,0.98]", "c=x y"]
    env = runtime_env(env_vars={"HF_TOKEN": "t"})
    assert env["env_vars"] == {"PYTHONUNBUFFERED": "1", "HF_TOKEN": "t"} and ".venv*" in env["excludes"]


def test_an_address_that_is_not_a_dashboard_url_is_refused() -> None:
    with pytest.raises(SubmitError, match="not a dashboard URL"):
        connect("127.0.0.1:8265")
