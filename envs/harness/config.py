"""``HarnessConfig``: the knobs of the MCP harness (``envs.harness.agent``), in a module of its own so a profile that
names them validates without loading the harness (its tools, the tokenizer stack)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envs.harness.chat import ANSWER_INSTRUCTIONS, ToolListing
from envs.harness.tool_formats.base import ToolFormatName


class HarnessConfig(BaseModel):
    """Knobs of the MCP harness; defaults are the recipe's hero numbers (RECIPE "Hero configuration")."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # core
    max_turns: int = Field(64, ge=1)
    max_tokens_per_turn: int = Field(50_000, ge=1, description="per-turn max tokens (35B: 50k, 397B: 40k)")
    context_budget_tokens: int = Field(160_000, ge=2, description="prompt + all turns (train 160k, eval 262k)")
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = Field(
        None, ge=-(2**63), lt=2**63, description="base sampling seed; each (sample, turn) gets its own"
    )
    # advanced
    tool_result_max_chars: int = Field(42_000, ge=1, description="longer tool results are cut, with a marker")
    tool_timeout_s: float = Field(300.0, gt=0.0)
    max_parse_retries: int = Field(2, ge=0, description="corrective turns for unparsable calls, in a row")
    context_nudge: bool = False
    context_nudge_threshold: float = Field(0.2, gt=0.0, lt=1.0, description="share of the context budget left")
    agent_timeout_s: float = Field(3600.0, gt=0.0)
    system_prompt: str = ANSWER_INSTRUCTIONS
    tool_listing: ToolListing = Field(
        ToolListing.FULL, description="full: JSON schemas via the template; compact: one line per tool (small models)"
    )
    tool_format: ToolFormatName = Field(
        ToolFormatName.HERMES_JSON,
        description="the model family's tool-call dialect: hermes_json (Qwen2.5/3), qwen3_xml (Qwen3-Coder/3.5/3.6)",
    )
    thinking: bool | None = Field(
        None,
        description="the model reasons in <think>…</think> before each turn (the chat template's enable_thinking; "
        "false: the generation prompt closes an empty <think>; null: the template's default, unasked)",
    )
    reasoning_in_history: bool = Field(
        True,
        description="earlier turns' reasoning stays in context (Qwen3.6; Qwen3's template strips it on a re-render); "
        "the token-in harness never re-renders, so this says what a chat route would see",
    )
