"""One module per `attnwatch` subcommand; each exposes `register(subparsers)`."""


def add_lock_timeout(parser) -> None:
    """`--lock-timeout`: how long a writing command waits for another process to release the history
    (history.store.db.open_write); None: the setting ATTNWATCH_LOCK_WAIT_S (history.store.locks)."""
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for another process to release the history (default: $ATTNWATCH_LOCK_WAIT_S, else 60)",
    )
