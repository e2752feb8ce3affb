"""The MCP agent harness, token in / token out: tool sessions, engine client, chat deltas, parsing, the agent loop,
and the harness settings a policy carries (``policy.py``: ``harness.json``).

``run_agent`` drives one rollout of a task against an OpenAI/vLLM-compatible ``/v1/completions`` engine with token-id
prompts and returns a token-exact ``envs.types.Trajectory``; ``run_group`` runs n samples of one task concurrently.
"""
