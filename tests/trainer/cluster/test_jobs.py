"""The Ray Jobs REST client against a scripted dashboard (an httpx transport): submission with the working dir
uploaded once, following a job (log, polls, end), timeouts, unknown jobs, errors as one line, and the SkyRL outcome
read from the log's metric blocks."""

import json
import shlex
import time

import httpx
import pytest

from trainer.cluster import jobs as jobs_module
from trainer.cluster.jobs import JobCommand, JobsError, RayJobs
from trainer.skyrl.submit import outcome

LOG = "[dry run] Step 1:\n{'generate/batch_num_seq': 256, 'timing/step': 0.5, 'trainer/global_step': 1}\n"


class Dashboard:
    """Answers like Ray's dashboard: a job runs for ``polls`` status reads, then ends with ``final``."""

    def __init__(self, polls: int = 2, final: str = "SUCCEEDED", agentless_submits: int = 0) -> None:
        self.polls, self.final, self.reads, self.stopped = polls, final, 0, False
        self.agentless_submits = agentless_submits  # submissions refused as a cluster whose agents are not up yet
        self.packages: dict[str, bytes] = {}
        self.submitted: dict = {}

    def status(self) -> str:
        if self.stopped:
            return "STOPPED"
        return self.final if self.reads > self.polls else "RUNNING"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if path.startswith("/api/packages/"):
            if method == "PUT":
                self.packages[path] = request.content
                return httpx.Response(200, json={})
            return httpx.Response(200 if path in self.packages else 404, json={})
        if path == "/api/jobs/" and method == "POST" and self.agentless_submits:
            self.agentless_submits -= 1
            return httpx.Response(500, text="No available agent to submit job, please try again later.")
        if path == "/api/jobs/" and method == "POST":
            self.submitted = json.loads(request.content)
            return httpx.Response(200, json={"submission_id": self.submitted["submission_id"] or "raysubmit_1"})
        if path.startswith("/api/jobs/unknown"):
            return httpx.Response(404, text="job unknown does not exist")
        if path.endswith("/logs"):
            return httpx.Response(200, json={"logs": LOG if self.reads > self.polls else LOG[:10]})
        if path.endswith("/stop"):
            self.stopped = True
            return httpx.Response(200, json={"stopped": True})
        if path == "/api/jobs/":
            return httpx.Response(200, json=[{"submission_id": "job-1", "status": self.status(), "entrypoint": "x"}])
        if path.startswith("/api/jobs/"):
            self.reads += 1
            return httpx.Response(200, json={"status": self.status()})
        return httpx.Response(500, text="unexpected")


def jobs(dashboard: Dashboard) -> RayJobs:
    return RayJobs("http://head:8265", transport=httpx.MockTransport(dashboard))


def test_following_a_job_to_its_end_shows_each_new_piece_of_log_once() -> None:
    shown: list[str] = []
    polls: list[int] = []
    dashboard = Dashboard()
    status = jobs(dashboard).follow(
        "job-1", timeout_s=30, on_log=shown.append, on_poll=lambda: polls.append(1), poll_s=0
    )
    assert status == "SUCCEEDED" and "".join(shown) == LOG and len(polls) == 3
    result = outcome(jobs(dashboard), "job-1", status, run="dry")
    assert result.succeeded and result.rows == [
        {"stage": "hero", "run": "dry", "step": 1, "wall_s": 0.5, "trajectories": 256, "trained": False}
    ]


def test_a_job_past_its_timeout_is_stopped() -> None:
    dashboard = Dashboard(polls=10**9)
    started = time.monotonic()
    assert jobs(dashboard).follow("job-2", timeout_s=1.5, poll_s=0.1) == "TIMEOUT"
    assert dashboard.stopped and time.monotonic() - started < 10


def test_a_failed_job_is_reported_and_an_unknown_one_is_none() -> None:
    assert jobs(Dashboard(final="FAILED")).follow("job-3", timeout_s=30, poll_s=0) == "FAILED"
    assert jobs(Dashboard()).find("unknown") is None and jobs(Dashboard()).find("job-4") == "RUNNING"
    with pytest.raises(JobsError, match="knows no job 'unknown'"):
        jobs(Dashboard()).status("unknown")
    assert jobs(Dashboard()).stop("unknown") is False  # recorded on a cluster since restarted: nothing to stop
    assert jobs(Dashboard()).listing()[0]["submission_id"] == "job-1"


def test_submission_uploads_the_working_dir_once_and_asks_for_the_resources(tmp_path) -> None:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "x.py").write_text("print(1)\n")
    args = ["a.b=[0.9,0.98]", "c=x y"]
    command = JobCommand("trainer.x", args, "/opt/py", {"HF_TOKEN": "t"}, {"trainer": 1}, working_dir=tmp_path)
    assert shlex.split(command.entrypoint()) == ["/opt/py", "-m", "trainer.x", "a.b=[0.9,0.98]", "c=x y"]
    dashboard = Dashboard()
    client = jobs(dashboard)
    assert client.submit(command, submission_id="rl-recipe-x-1", metadata={"run": "r"}) == "rl-recipe-x-1"
    submitted = dashboard.submitted
    assert submitted["entrypoint_resources"] == {"trainer": 1} and submitted["metadata"] == {"run": "r"}
    assert (
        submitted["runtime_env"]["working_dir"].startswith("gcs://_ray_pkg_")
        and "excludes" not in submitted["runtime_env"]
    )
    assert submitted["runtime_env"]["env_vars"] == {"PYTHONUNBUFFERED": "1", "HF_TOKEN": "t"}
    assert len(dashboard.packages) == 1
    client.submit(command, submission_id="rl-recipe-x-2")
    assert len(dashboard.packages) == 1  # the same content is not uploaded again


def test_a_cluster_whose_job_agents_are_not_up_yet_is_asked_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jobs_module, "POLL_S", 0.0)
    command = JobCommand("trainer.x", working_dir=tmp_path)
    dashboard = Dashboard(agentless_submits=3)
    assert jobs(dashboard).submit(command, submission_id="rl-recipe-x-1") == "rl-recipe-x-1"
    assert dashboard.agentless_submits == 0 and dashboard.submitted["submission_id"] == "rl-recipe-x-1"
    monkeypatch.setattr(jobs_module, "AGENT_WAIT_S", 0.0)  # one that never gets an agent: the refusal, in one line
    with pytest.raises(JobsError, match="submit job: HTTP 500: No available agent"):
        jobs(Dashboard(agentless_submits=10**6)).submit(command, submission_id="rl-recipe-x-2")


def test_errors_are_one_line_and_an_address_that_is_not_a_dashboard_url_is_refused() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(JobsError, match=r"^connect to http://head:8265: connection refused$"):
        RayJobs("http://head:8265", transport=httpx.MockTransport(refuse)).find("job")
    broken = RayJobs("http://head:8265", transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom\n!")))
    with pytest.raises(JobsError, match="stop job: HTTP 500: boom !"):
        broken.stop("job")
    with pytest.raises(JobsError, match="not a Ray dashboard URL"):
        RayJobs("127.0.0.1:8265")
