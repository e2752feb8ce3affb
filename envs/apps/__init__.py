"""App operations over a world: filesystem, docs, sheets, pdf, slides, mail, chat, calendar, code_exec.

Each operation is registered in ``TOOLS`` under ``<app>.<op>``; call them through ``call_tool``. The operations and
their outputs are the contract in the apps catalogue (tool docstrings are what a model reads). An app's module (and
its file library: openpyxl, pdfplumber, python-pptx, python-docx) loads when first needed: ``TOOLS`` loads them all,
``call_tool(world, "sheets.read_cell", ...)`` only sheets.
"""

from typing import Any

from envs.apps.base import Tool, ToolError, World, call_tool, load_apps, tool_schema

__all__ = ["TOOLS", "Tool", "ToolError", "World", "call_tool", "load_apps", "tool_schema"]


def __getattr__(name: str) -> Any:
    if name == "TOOLS":  # the whole registry: every app imported
        return load_apps()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
