"""``recipe view``: the trace explorer — a web page to read a run's trajectories, tool failures, gates and curves.

recipe view RUN [--runs-root runs] [--port 8765] [--tokenizer PATH]
    serves the page on http://127.0.0.1:PORT/ (loopback only) until Ctrl-C: the run's stages with their gate reports;
    the trajectories, filtered (stage, task, domain, tier, tool, error class, reward, stop reason, weights version …),
    sorted and paged in DuckDB; one trajectory turn by turn (generated tokens vs observations, tool calls, nudge,
    grades); base vs trained on one task; the per-tool de-risk numbers with click-through; reward and Pass@1 curves
    and the ablation / transfer tables. Reads the catalog read-only, a connection per request, so it can watch a
    run that is still going. Writes nothing.
recipe view RUN --static OUT [--limit 5000]
    writes OUT/index.html with its data as scripts (opens from file://, no server): at most LIMIT trajectories, a
    sample covering every stage and source with base and trained of a task kept together; prints its progress. OUT
    must be new, empty, or an earlier export's folder (which it replaces whole); anything else is refused.

The tokens are decoded with the base policy's ``tokenizer.json`` (the de-risk stage's ``policy`` output) or
``--tokenizer`` (a tokenizer.json or a folder holding one); without either the page shows token ids.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.args import RUNS_ROOT_HELP, port, positive_int
from envs.errors import RecipeError
from envs.net import LOOPBACK

DEFAULT_PORT = 8765


class ViewError(RecipeError):
    """The explorer cannot open the run as asked."""


def _say(line: str) -> None:
    """A progress line, flushed: an export of thousands of trajectories takes a while and should not run silent."""
    print(line, flush=True)


def _view(args: argparse.Namespace) -> int:
    from tasks.explorer.queries import Explorer
    from tasks.explorer.tokens import find_tokenizer, load_decoder
    from tasks.run_store import RunStore

    store = RunStore.open(Path(args.runs_root), args.run)
    store.verify()  # a damaged run.json or manifest fails in one line, not on every page the server serves
    tokenizer = Path(args.tokenizer) if args.tokenizer else find_tokenizer(store)
    try:
        decoder = load_decoder(tokenizer) if tokenizer else None
    except Exception as error:  # a missing file, or the tokenizers library refusing a damaged one
        raise ViewError(f"cannot read the tokenizer {tokenizer}: {error}") from None
    if decoder is None:
        print("no tokenizer.json found for this run: the page shows token ids (pass --tokenizer PATH)", flush=True)
    explorer = Explorer(store, decoder)
    if args.static:
        from tasks.explorer.static_export import write_static

        done = write_static(explorer, Path(args.static), limit=args.limit, progress=_say)
        print(
            f"wrote {done.index}: {done.written} of {done.total} trajectories, {done.size / 2**20:.1f} MiB, in "
            f"{done.seconds:.1f} s  (open it in a browser; file:// needs no server)"
        )
        return 0
    from tasks.explorer.server import serve

    print(f"trace explorer for run {store.run_id}: http://{LOOPBACK}:{args.port}/   (Ctrl-C stops it)", flush=True)
    serve(explorer, LOOPBACK, args.port)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    view = commands.add_parser("view", help="the trace explorer: a page over a run's trajectories, tools, gates")
    view.add_argument("run", help="run id or folder")
    view.add_argument("--runs-root", default="runs", help=RUNS_ROOT_HELP)
    view.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"port on {LOOPBACK} (default {DEFAULT_PORT})")
    view.add_argument("--static", metavar="OUT", help="write a self-contained folder instead of serving")
    view.add_argument(
        "--limit", type=positive_int, default=5000, help="most trajectories in a static folder (default 5000)"
    )
    view.add_argument("--tokenizer", help="tokenizer.json (or a folder with one) to decode tokens")
    view.set_defaults(handler=_view)
