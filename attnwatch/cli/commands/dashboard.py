"""`attnwatch dashboard`: serve the Streamlit app over the history in --db / $ATTNWATCH_DB.

The app is started with `streamlit run` in a child process so that Streamlit owns its own
event loop and signal handling; the database path reaches it through ATTNWATCH_DB, which is
the only way the app learns where the history lives. By default it listens on loopback only:
the dashboard has no authentication, so exposing it is an explicit choice (--host). A taken
port is refused before Streamlit starts (ci/port.py), and the child runs in its own process
group that goes down with this command, whatever signal stops it (ci/process_group.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.ci.port import DEFAULT_HOST, DEFAULT_PORT, parse_port, port_problem
from attnwatch.ci.process_group import run_in_group
from attnwatch.history.store import file_check


def entrypoint() -> Path:
    """The app's entry script, located without importing the app (ci does not depend on it)."""
    spec = importlib.util.find_spec("attnwatch.app")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the `app` package is not installed next to `ci`; reinstall attnwatch")
    return Path(list(spec.submodule_search_locations)[0]) / "streamlit_app.py"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="serve the dashboard (Streamlit) over the history",
        description="Serve the Streamlit dashboard over the DuckDB history (read-only, short-lived connections).",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: loopback only)")
    p.add_argument("--dry-run", action="store_true", help="print the command that would run and exit")
    p.set_defaults(func=_run)


def streamlit_command(port: int, host: str) -> list[str]:
    """The exact `streamlit run` command line: headless, no usage statistics, no file watcher,
    and the viewer's toolbar (no "Deploy" button: this is a served dashboard, not a script being
    developed), through `app.serve`, which imports the dashboard's modules before the server
    listens, so the first visitor does not wait for them, and without Streamlit's "magic" (the
    pages draw only through st calls; rewriting a page's source for it cost each page's first
    visit 50-90 ms on the 2-core CI machine). Set here, not in a
    .streamlit/config.toml, so it holds in an installed package whatever the working directory."""
    return [
        sys.executable,
        "-m",
        "attnwatch.app.serve",
        "run",
        str(entrypoint()),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
        "--runner.magicEnabled",
        "false",
    ]


def _run(args) -> int:
    try:
        parse_port(args.port)
    except ValueError as exc:
        raise UserError(f"--port: {exc}") from None
    location = args.db  # parsed by cli.main: a URL or an extension prefix is refused there, in one line
    lake = location.is_lake
    db = location.label
    if not lake and not file_check.existing(location.file, db):  # a directory, a link to nothing: refused
        print(
            f"attnwatch dashboard: note: {db} does not exist yet; the dashboard will say the history is empty",
            file=sys.stderr,
        )
    cmd = streamlit_command(args.port, args.host)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    try:
        problem = port_problem(args.host, args.port)
    except OSError as exc:  # an address this machine does not have
        raise UserError(f"--host {args.host}: {exc.strerror or exc}") from None
    if problem:
        raise UserError(problem)
    env = dict(os.environ, ATTNWATCH_DB=db)
    print(f"attnwatch dashboard: http://{args.host}:{args.port}  (history: {db})", file=sys.stderr)
    return run_in_group(cmd, env)
