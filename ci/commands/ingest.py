"""`attnwatch ingest PATH...`: load run bundles (directories) and pytest-benchmark files (.json).

Every input is validated before anything is written; one bad input and nothing is stored
(exit 2, the message names the file and field). The same bundle twice is skipped.
"""

from __future__ import annotations

from ci.commands import add_lock_timeout


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ingest",
        help="load run bundles / pytest-benchmark JSON files into the history",
        description="Validate every PATH (a run bundle directory or a pytest-benchmark .json file), "
        "then store each as one transaction. Idempotent: a run already stored is skipped.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="bundle directory or pytest-benchmark .json file")
    add_lock_timeout(p)
    p.set_defaults(func=_run)


def _run(args) -> int:
    # Imported here: duckdb is not installed on GPU runners, where the CLI must still load.
    from history.ingest import ingest_paths

    report = ingest_paths(args.db, args.paths, deadline_s=args.lock_timeout)
    for line in report.lines():
        print(line)
    return 0
