"""A throw-away PostgreSQL cluster for the results store's tests: initdb, pg_ctl, a fresh database per test.

Why not pytest-postgresql: it runs initdb and pg_ctl as the calling user, and the suite runs as root
in CI, where PostgreSQL refuses to start. Here, as root, the cluster belongs to Debian's `postgres`
user (made by the postgresql package) and the commands run through `runuser`. The server listens on
a Unix socket in its own directory only (no TCP port to collide with another job's), with fsync off:
the tests kill clients, never the server.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PostgresCluster", "find_pg_bin"]


def find_pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin), or PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresCluster:
    """Start with start(), make databases with database(), stop() removes everything."""

    def __init__(self, bin_dir: Path):
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="anima-pg-"))
        self.data = self.root / "data"
        self.port = 5432            # only names the socket file: TCP is off
        self.databases = 0
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        done = subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> "PostgresCluster":
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "anima", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        options = f"-k {self.root} -c listen_addresses='' -p {self.port} -c fsync=off -c max_connections=50"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://anima@/{database}?host={self.root}&port={self.port}"

    def database(self) -> str:
        """A new empty database's URL."""
        import psycopg
        self.databases += 1
        name = f"results_{self.databases}"
        with psycopg.connect(host=str(self.root), port=self.port, user="anima", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
