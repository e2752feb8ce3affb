"""The Ray Jobs path against a stub client: following a job (log, polls, end), timeouts, bounded calls, the job's
command, and the SkyRL outcome read from the log's metric blocks."""

import shlex
import time

import pytest

from trainer.cluster.jobs import JobCommand, JobsError, RayJobs, bounded
from trainer.skyrl.submit import outcome

LOG = "[dry run] Step 1:\n{'generate/batch_num_seq': 256, 'timing/step': 0.5, 'trainer/global_step': 1}\n"


class StubClient:
    """Answers like ``JobSubmissionClient``: the job runs for ``polls`` status calls, then ends with ``final``."""

    def __init__(self, polls: int = 2, final: str = "SUCCEEDED") -> None:
        self.calls, self.polls, self.final, self.stopped = 0, polls, final, False
        self.submitted: dict = {}

    def submit_job(self, **kwargs) -> str:
        self.submitted = kwargs
        return kwargs["submission_id"] or "raysubmit_1"

    def get_job_status(self, job_id: str) -> str:
        if job_id == "unknown":
            raise RuntimeError("Job unknown does not exist")
        self.calls += 1
        if self.stopped:
            return "STOPPED"
        return self.final if self.calls > self.polls else "RUNNING"

    def get_job_logs(self, job_id: str) -> str:
        return LOG if self.calls > self.polls else LOG[:10]

    def stop_job(self, job_id: str) -> bool:
        self.stopped = True
        return True


def jobs(client: StubClient) -> RayJobs:
    return RayJobs("http://head:8265", client=client)


def test_following_a_job_to_its_end_shows_each_new_piece_of_log_once() -> None:
    shown: list[str] = []
    polls: list[int] = []
    client = StubClient()
    status = jobs(client).follow("job-1", timeout_s=30, on_log=shown.append, on_poll=lambda: polls.append(1), poll_s=0)
    assert status == "SUCCEEDED" and "".join(shown) == LOG and len(polls) == 3
    result = outcome(jobs(client), "job-1", status, run="dry")
    assert result.succeeded and result.rows == [
        {"stage": "hero", "run": "dry", "step": 1, "wall_s": 0.5, "trajectories": 256, "trained": False}
    ]


def test_a_job_past_its_timeout_is_stopped() -> None:
    client = StubClient(polls=10**9)
    started = time.monotonic()
    assert jobs(client).follow("job-2", timeout_s=1.5, poll_s=0.1) == "TIMEOUT"
    assert client.stopped and time.monotonic() - started < 10


def test_a_failed_job_is_reported_and_an_unknown_one_is_none() -> None:
    assert jobs(StubClient(final="FAILED")).follow("job-3", timeout_s=30, poll_s=0) == "FAILED"
    assert jobs(StubClient()).find("unknown") is None and jobs(StubClient()).find("job-4") == "RUNNING"


def test_a_call_that_hangs_is_bounded() -> None:
    with pytest.raises(JobsError, match=r"within 0\.2 s"):
        bounded(lambda: time.sleep(5), 0.2, "slow call")
    with pytest.raises(JobsError, match="ValueError: nope"):
        bounded(lambda: (_ for _ in ()).throw(ValueError("nope")), 5, "bad call")


def test_the_job_command_runtime_env_and_resources() -> None:
    args = ["a.b=[0.9,0.98]", "c=x y"]
    command = JobCommand("trainer.skyrl.dryrun", args, "/opt/py", {"HF_TOKEN": "t"}, {"trainer": 1})
    assert shlex.split(command.entrypoint()) == ["/opt/py", "-m", "trainer.skyrl.dryrun", "a.b=[0.9,0.98]", "c=x y"]
    env = command.runtime_env()
    assert env["env_vars"] == {"PYTHONUNBUFFERED": "1", "HF_TOKEN": "t"} and ".venv*" in env["excludes"]
    client = StubClient()
    assert jobs(client).submit(command, submission_id="rl-recipe-x-1", metadata={"run": "r"}) == "rl-recipe-x-1"
    assert client.submitted["entrypoint_resources"] == {"trainer": 1} and client.submitted["metadata"] == {"run": "r"}


def test_an_address_that_is_not_a_dashboard_url_is_refused() -> None:
    with pytest.raises(JobsError, match="not a Ray dashboard URL"):
        RayJobs("127.0.0.1:8265")
