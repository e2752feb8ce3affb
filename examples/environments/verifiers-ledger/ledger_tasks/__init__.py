"""A verifiers environment written against verifiers' public API (0.4, ``verifiers.v1``): questions about a small
ledger, a toolset (an MCP server) to look accounts up, and a reward that checks the final reply.

Loaded as verifiers loads any environment (``vf.load_environment``: the id ``ledger-tasks`` is this module); rl-recipe
runs it through its own harness and TITO path (``envs.byo.verifiers``).
"""

import verifiers.v1 as vf

ACCOUNTS = {"ACC-1": 1250, "ACC-2": 430, "ACC-3": 9100, "ACC-4": 75, "ACC-5": 2600, "ACC-6": 318}
OWNERS = {
    "ACC-1": "Globex",
    "ACC-2": "Initech",
    "ACC-3": "Hooli",
    "ACC-4": "Acme",
    "ACC-5": "Umbrella",
    "ACC-6": "Stark",
}


class LedgerData(vf.TaskData):
    answer: str


class Ledger(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "ledger"

    @vf.tool
    def list_accounts(self) -> str:
        """List every account id with its owner."""
        return "\n".join(f"{account}: {OWNERS[account]}" for account in ACCOUNTS)

    @vf.tool
    def balance(self, account: str) -> str:
        """The balance of one account (an id such as ACC-1)."""
        if account not in ACCOUNTS:
            raise ValueError(f"no account {account!r}; accounts: {', '.join(ACCOUNTS)}")
        return f"{account} ({OWNERS[account]}): balance {ACCOUNTS[account]} EUR"


class LedgerTask(vf.Task[LedgerData]):
    @classmethod
    def toolsets(cls, config):
        return [Ledger(vf.ToolsetConfig())]

    @vf.reward(weight=1.0)
    async def correct(self, task: LedgerData, trace: vf.Trace) -> float:
        return float(task.answer.casefold() in (trace.last_reply or "").casefold())


class LedgerTaskset(vf.Taskset[LedgerTask]):
    def load(self):
        system = "Use the ledger tools, then answer briefly."
        for account, balance in ACCOUNTS.items():
            yield LedgerTask(
                LedgerData(
                    prompt=f"What is the balance of account {account}?", system_prompt=system, answer=str(balance)
                ),
                self.config.task,
            )
            yield LedgerTask(
                LedgerData(prompt=f"Who owns account {account}?", system_prompt=system, answer=OWNERS[account]),
                self.config.task,
            )


__all__ = ["LedgerTaskset"]
