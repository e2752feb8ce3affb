"""The trace explorer: a read-only web page over one run folder (``recipe view RUN``).

It lives in ``tasks/`` because it reads what the tasks write — the run store (``run.json``, stage manifests) and the
run's DuckDB catalog — but it never imports Prefect, so it starts in a second and can be pointed at a run that is
still going (each request opens the catalog read-only and closes it again: the flow process stays its one writer).

* ``queries`` — the query layer: every SQL statement, parameterized, paged with LIMIT/OFFSET (no full-table loads);
* ``tokens`` — a trajectory turn by turn: its tokens decoded in loss-mask runs, tool calls, the context nudge;
* ``server`` — the Starlette app (JSON API + the page) served on loopback;
* ``static_export`` — the same page as a self-contained folder that opens from ``file://``, written only into a
  folder of its own and swapped in whole;
* ``selection`` — which trajectories such a folder holds: a share of every stage and source, base and trained kept
  together;
* ``sample`` — a small realistic run built through the catalog and the run store (tests, screenshots);
* ``static/`` — the single page: plain HTML, CSS and JS, no library and nothing loaded from outside.

    recipe view RUN [--port 8765]        # http://127.0.0.1:8765/
    recipe view RUN --static OUT         # OUT/index.html
"""
