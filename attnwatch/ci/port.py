"""The dashboard's TCP port: its one default, and whether it is free before anything starts.

`make demo` runs this with a bare `python3 -m attnwatch.ci.port [PORT]` before it sets anything up, so
that a taken port fails in a second with one line instead of after the install and the
measuring; `attnwatch dashboard` asks the same question before it starts Streamlit. Standard
library only: it runs before the virtual environment exists.
"""

from __future__ import annotations

import errno
import socket
import sys

DEFAULT_PORT = 8501
DEFAULT_HOST = "127.0.0.1"


def parse_port(text: str | int) -> int:
    """A TCP port number, or ValueError saying why not."""
    try:
        port = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a TCP port (1-65535)") from None
    if not 0 < port < 65536:
        raise ValueError(f"{port} is not a TCP port (1-65535)")
    return port


def taken(host: str, port: int) -> bool:
    """Whether something already listens on host:port (a bind, as the server will do, fails).

    SO_REUSEADDR as Tornado sets it, so a just-closed server's TIME_WAIT does not count as taken.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def port_problem(host: str, port: int) -> str | None:
    """The one-line reason the dashboard cannot listen on host:port, or None when it can."""
    if taken(host, port):
        return (
            f"port {port} is in use on {host}: stop whatever serves it, or pick another port "
            f"(attnwatch dashboard --port N, make demo PORT=N)"
        )
    return None


def main(argv: list[str]) -> int:
    """`python3 -m attnwatch.ci.port [PORT]`: exit 0 when the port (default 8501) is free, else say why."""
    try:
        port = parse_port(argv[0]) if argv and argv[0] else DEFAULT_PORT
        problem = port_problem(DEFAULT_HOST, port)
    except (ValueError, OSError) as exc:
        problem = f"PORT: {exc}"
    if problem:
        print(f"attnwatch: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
