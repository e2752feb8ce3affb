"""The server's wire format (OpenAI / vLLM): request bodies, and the error body every refusal and failure gets.

Request models are strict: a wrong JSON type is refused with a 400, never coerced, and so is a string that is not
Unicode (a lone surrogate, which JSON's ``\\ud800`` escapes can carry but no tokenizer or reply can). Every error is
``{"error": {"message", "type", "code"}}``; ``install_error_handlers`` maps validation errors, engine refusals and
``ApiError`` to 4xx bodies naming what was wrong, and anything unexpected to a 500 of the same shape (the process
keeps serving).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from trainer.engine.types import EngineRequestError, SamplingParams, Seed

MAX_N = 16


class SamplingFields(BaseModel):
    """Fields shared by both generation routes; strict so that wrong JSON types are refused, not coerced."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    model: str | None = None
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    ignore_eos: bool = False
    return_token_ids: bool = False

    @model_validator(mode="before")
    @classmethod
    def _unicode_only(cls, data: Any) -> Any:
        """Refuse a lone surrogate anywhere in the body: the tokenizer and the error body would fail on it (a 500)."""
        where = lone_surrogate_at(data)
        if where is not None:
            raise ValueError(f"{where or 'the body'} holds a lone surrogate (e.g. \\ud800), which is not text")
        return data

    def sampling_params(self, max_tokens: int | None, logprobs: int) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            max_tokens=max_tokens,
            stop=tuple(stop),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
        )


_NUMBERS = frozenset({int, float, bool})


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string in decoded JSON holding a lone surrogate, in a value or in a key (then the
    path of its object); None when every string is text. The path never quotes the string: no error body could."""
    if isinstance(value, str):
        return None if _is_unicode(value) else path
    if isinstance(value, list) and _NUMBERS.issuperset(map(type, value)):
        return None  # a token-id prompt: hundreds of numbers, skipped at C speed (~1 ms a request if visited)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and not _is_unicode(key):
            return path
        if isinstance(item, (str, dict, list)):  # a tuple: isinstance over a union type is 2x slower
            found = lone_surrogate_at(item, f"{path}.{key}".lstrip("."))
            if found is not None:
                return found
    return None


def _is_unicode(text: str) -> bool:
    """Whether `text` is encodable (as UTF-8): false exactly when it holds a lone surrogate."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class CompletionRequest(SamplingFields):
    prompt: list[int] | str
    max_tokens: int = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)


class ChatCompletionRequest(SamplingFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    path: str


class ApiError(Exception):
    """An error with an HTTP status, rendered as an OpenAI-style error body."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_body(status: HTTPStatus, message: str) -> JSONResponse:
    error_type = status.phrase.replace(" ", "") + "Error"
    return JSONResponse({"error": {"message": message, "type": error_type, "code": status.value}}, status.value)


def _validation_message(errors: list[Any]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)


async def _invalid(_: Request, exc: RequestValidationError | ValidationError) -> JSONResponse:
    return error_body(HTTPStatus.BAD_REQUEST, _validation_message(list(exc.errors())))


async def _refused(_: Request, exc: EngineRequestError) -> JSONResponse:
    return error_body(HTTPStatus.BAD_REQUEST, str(exc))


async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
    return error_body(exc.status, str(exc))


async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (a body it cannot decode, a wrong method) in the same error shape as ours."""
    return error_body(HTTPStatus(exc.status_code), str(exc.detail))


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    return error_body(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


# Exception type → handler; Starlette picks the most specific class, so the catch-all only sees the rest.
_HANDLERS: dict[type[Exception], Any] = {
    RequestValidationError: _invalid,
    ValidationError: _invalid,
    EngineRequestError: _refused,
    ApiError: _api_error,
    StarletteHTTPException: _http_error,
    Exception: _unexpected,
}


def install_error_handlers(app: FastAPI) -> None:
    """Answer every failure of ``app`` with the error body (4xx for the client's errors, 500 for the rest)."""
    for exception, handler in _HANDLERS.items():
        app.add_exception_handler(exception, handler)
