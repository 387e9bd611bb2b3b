"""A real PostgreSQL server for the lake tests: initdb + pg_ctl in a temporary directory.

The server listens on a free loopback port only (and a socket in its own directory), trusts
local connections, runs with fsync off (a test server: speed over durability), and is stopped
and removed by `stop()`. initdb and the server refuse to run as root, which CI is: as root they
run as the `postgres` OS user that Debian's `postgresql` package creates (`runuser -u postgres`),
in a directory that user owns. `find_binaries()` returns None, and `why_unavailable()` a reason,
where no server can be started; the fixtures in conftest.py skip with that reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "attnwatch"
BIN_ENV = "ATTNWATCH_PG_BIN"  # a directory holding initdb, pg_ctl and psql, to override the search


def find_binaries() -> Path | None:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/N/bin), or PATH's."""
    explicit = os.environ.get(BIN_ENV)
    if explicit:  # exclusive: also how to check the tests' skip message
        candidates = [Path(explicit)]
        return candidates[0] if all((candidates[0] / t).is_file() for t in ("initdb", "pg_ctl", "psql")) else None
    candidates = []
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted((p for p in debian.iterdir() if p.name.isdigit()), key=lambda p: int(p.name), reverse=True)
        candidates += [v / "bin" for v in versions]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if all((c / tool).is_file() for tool in ("initdb", "pg_ctl", "psql")):
            return c
    return None


def _run_as() -> list[str]:
    """The prefix that runs a server tool: nothing, or `runuser -u postgres --` as root."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def why_unavailable() -> str | None:
    if find_binaries() is None:
        return (
            "no PostgreSQL server binaries (initdb, pg_ctl) found: install Debian's postgresql package "
            f"(`make test` does, as root) or set {BIN_ENV}"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` OS user to run the server as (install postgresql)"
        if shutil.which("runuser") is None:
            return "running as root and `runuser` is missing (util-linux)"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int

    def dsn(self, dbname: str, user: str = SUPERUSER) -> str:
        return f"dbname={dbname} host=127.0.0.1 port={self.port} user={user}"

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        out = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                self.dsn(dbname),
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql failed ({sql}): {out.stderr.strip()}")
        return out.stdout.strip()

    def create_database(self, name: str) -> str:
        self.psql(f'CREATE DATABASE "{name}"')
        return name

    def read_only_role(self, dbname: str, role: str) -> str:
        """README's dashboard role: a login with SELECT on the catalog's tables and nothing else; its DSN."""
        self.psql(f"CREATE ROLE {role} LOGIN")
        self.psql(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}", dbname)
        return self.dsn(dbname, user=role)

    def restart(self, mode: str = "fast") -> None:
        """`pg_ctl restart -m MODE`: every client connection is cut, the server is back when this returns."""
        subprocess.run(
            [
                *_run_as(),
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-m",
                mode,
                "-o",
                _options(self.port, self.root),
                "-l",
                str(self.root / "server.log"),
                "-w",
                "-t",
                "60",
                "restart",
            ],
            check=True,
            capture_output=True,
            timeout=90,
        )

    def halt(self) -> None:
        """Stop the server (fast), keeping its data: `start_again` brings it back."""
        subprocess.run(
            [*_run_as(), str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop"],
            check=True,
            capture_output=True,
            timeout=90,
        )

    def start_again(self) -> None:
        subprocess.run(
            [
                *_run_as(),
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-o",
                _options(self.port, self.root),
                "-l",
                str(self.root / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=True,
            capture_output=True,
            timeout=90,
        )

    def stop(self) -> None:
        subprocess.run(
            [*_run_as(), str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _options(port: int, root: Path) -> str:
    return f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"


def start() -> PostgresServer:
    """initdb a fresh cluster in a new temporary directory and start it; the caller stops it."""
    bin_dir = find_binaries()
    reason = why_unavailable()
    if reason:
        raise RuntimeError(reason)
    root = Path(tempfile.mkdtemp(prefix="attnwatch-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    prefix = _run_as()
    data, log = root / "data", root / "server.log"
    subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for _attempt in range(3):  # a port found free can be taken before the server binds it
        port = _free_port()
        options = _options(port, root)
        started = subprocess.run(
            [
                *prefix,
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
        if started.returncode == 0:
            return PostgresServer(bin_dir, root, port)
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"the PostgreSQL server did not start: {started.stderr.strip() or started.stdout.strip()}")
