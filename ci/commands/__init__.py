"""One module per `attnwatch` subcommand; each exposes `register(subparsers)`."""


def add_lock_timeout(parser) -> None:
    """`--lock-timeout`: how long a writing command waits for another writer (history.store.db.open_write)."""
    parser.add_argument("--lock-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long to wait for another writer to release the history (default 60)")
