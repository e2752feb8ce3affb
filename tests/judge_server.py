"""A real OpenAI-compatible judge server for the tests, on 127.0.0.1, whose verdicts follow a rule instead of a model.

``RULE``: a criterion passes when every number in it appears in the agent's final answer (deterministic: the same
input, the same verdict). ``YES``: every criterion passes (a judge that would pass an empty answer). ``FLIP``: the
rule's verdict, inverted on every other request (a judge that disagrees with itself). It records each request body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envs.net import serve_in_thread


class JudgeMode(StrEnum):
    RULE = "rule"
    YES = "yes"
    FLIP = "flip"


@dataclass
class RuleJudge:
    mode: JudgeMode = JudgeMode.RULE
    judged: list[dict] = field(default_factory=list)

    def verdict(self, user: str) -> dict:
        criterion = user.split("## Criterion\n", 1)[1].split("\n\n## ", 1)[0]
        answer = user.split("## Agent's final answer\n", 1)[1].split("\n\n## ", 1)[0]
        missing = [n for n in re.findall(r"\d+(?:\.\d+)?", criterion) if n not in answer]
        passed = not missing
        if self.mode is JudgeMode.YES:
            passed = True
        elif self.mode is JudgeMode.FLIP and len(self.judged) % 2 == 0:
            passed = not passed
        return {"passed": passed, "reason": f"missing {missing}" if missing else "all figures stated"}

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.judged.append(body)
            message = {"role": "assistant", "content": json.dumps(self.verdict(body["messages"][-1]["content"]))}
            return JSONResponse({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

        return app


@contextmanager
def judge_server(judge: RuleJudge) -> Iterator[str]:
    """``judge`` served on 127.0.0.1; yields its OpenAI-compatible root (``http://127.0.0.1:PORT/v1``)."""
    with serve_in_thread(judge.app()) as url:
        yield f"{url}/v1"
