"""One module per `attnwatch` subcommand; each exposes `register(subparsers)`."""
