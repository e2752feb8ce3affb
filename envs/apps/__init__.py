"""App operations over a world: filesystem, docs, sheets, pdf, slides, mail, chat, calendar, code_exec.

Importing this package registers every operation in ``TOOLS`` under ``<app>.<op>``; call them through ``call_tool``.
The operations and their outputs are the contract in the apps catalogue (tool docstrings are what a model reads).
"""

from envs.apps import calendar, chat, code_exec, docs, filesystem, mail, pdf, sheets, slides
from envs.apps.base import TOOLS, Tool, ToolError, World, call_tool, tool_schema

APPS = (filesystem, docs, sheets, pdf, slides, mail, chat, calendar, code_exec)

__all__ = ["APPS", "TOOLS", "Tool", "ToolError", "World", "call_tool", "tool_schema"]
