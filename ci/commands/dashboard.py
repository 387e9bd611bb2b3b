"""`attnwatch dashboard`: serve the Streamlit app over the history in --db / $ATTNWATCH_DB.

The app is started with `streamlit run` in a child process so that Streamlit owns its own
event loop and signal handling; the database path reaches it through ATTNWATCH_DB, which is
the only way the app learns where the history lives. By default it listens on loopback only:
the dashboard has no authentication, so exposing it is an explicit choice (--host).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from ci.errors import UserError
from history.location import LAKE_PREFIX


def entrypoint() -> Path:
    """The app's entry script, located without importing the app (ci does not depend on it)."""
    spec = importlib.util.find_spec("app")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the `app` package is not installed next to `ci`; reinstall attnwatch")
    return Path(list(spec.submodule_search_locations)[0]) / "streamlit_app.py"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="serve the dashboard (Streamlit) over the history",
        description="Serve the Streamlit dashboard over the DuckDB history (read-only, short-lived connections).",
    )
    p.add_argument("--port", type=int, default=8501, help="TCP port (default 8501)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: loopback only)")
    p.add_argument("--dry-run", action="store_true", help="print the command that would run and exit")
    p.set_defaults(func=_run)


def streamlit_command(port: int, host: str) -> list[str]:
    """The exact `streamlit run` command line: headless, no usage statistics, no file watcher;
    through `app.serve`, which imports the dashboard's modules before the server listens, so the
    first visitor does not wait for them."""
    return [
        sys.executable, "-m", "app.serve", "run", str(entrypoint()),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
    ]


def _run(args) -> int:
    if not 0 < args.port < 65536:
        raise UserError(f"--port: {args.port} is not a TCP port (1-65535)")
    lake = args.db.startswith(LAKE_PREFIX)
    db = args.db if lake else str(Path(args.db).expanduser())
    if not lake and not Path(db).exists():
        print(f"attnwatch dashboard: note: {db} does not exist yet; the dashboard will say the history is empty",
              file=sys.stderr)
    cmd = streamlit_command(args.port, args.host)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    env = dict(os.environ, ATTNWATCH_DB=db)
    print(f"attnwatch dashboard: http://{args.host}:{args.port}  (history: {db})", file=sys.stderr)
    return subprocess.call(cmd, env=env)
