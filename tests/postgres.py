"""A throw-away PostgreSQL cluster for the results store's tests: initdb, pg_ctl, a fresh database per test.

Why not pytest-postgresql: it runs initdb and pg_ctl as the calling user, and the suite runs as root
in CI, where PostgreSQL refuses to start. Here, as root, the cluster belongs to Debian's `postgres`
user (made by the postgresql package) and the commands run through `runuser`. The server listens on
a Unix socket in its own directory only (no TCP port to collide with another job's), with fsync off:
the tests kill clients, never the server.

A cluster dies with the process that started it, even when that process is SIGKILLed (pg_ctl puts
the server in a session of its own, so nothing else would stop it): a watchdog process, in a session
of its own too so a kill of the test's process group spares it, waits on a pidfd of its owner and
stops the cluster the moment the owner is gone. A pidfd names that one process (a pid could be
reused; a pipe's end would be inherited by every child the owner forks, and a forked child that
outlives the owner would keep the cluster alive). PR_SET_PDEATHSIG cannot do it: a fork does not
inherit it and the server is forked by pg_ctl (which exits at once), and runuser's change of user
clears it. Should the watchdog itself be killed (or the owner die while the server starts), the next
start reaps every cluster whose recorded owner is gone.
"""
from __future__ import annotations

import glob
import os
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["PostgresCluster", "find_pg_bin", "reap_stale_clusters", "halt_server", "PREFIX"]

PREFIX = "anima-pg-"
_OWNER = "owner.pid"        # the pid of the process whose cluster this is


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
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.data = self.root / "data"
        self.port = 5432            # only names the socket file: TCP is off
        self.databases = 0
        self.as_postgres = os.geteuid() == 0
        self.watchdog: subprocess.Popen | None = None
        (self.root / _OWNER).write_text(str(os.getpid()))
        if self.as_postgres:
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        _run_as(self.as_postgres, *args)

    def start(self) -> PostgresCluster:
        reap_stale_clusters(self.bin)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "anima", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        self.resume()
        self._watch()
        return self

    def halt(self) -> None:
        """Stop the server at once, keeping the cluster: a server lost under its clients."""
        halt_server(self.bin, self.root, self.as_postgres)

    def resume(self) -> None:
        """Start the server (again)."""
        options = f"-k {self.root} -c listen_addresses='' -p {self.port} -c fsync=off -c max_connections=50"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")

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

    def _watch(self) -> None:
        """Start the watchdog (module docstring). An owner killed while the server was starting
        leaves no watchdog: the next start's reap_stale_clusters stops that server."""
        owner = os.pidfd_open(os.getpid())
        try:
            self.watchdog = subprocess.Popen(
                [sys.executable, __file__, str(owner), str(self.bin), str(self.root), str(int(self.as_postgres))],
                pass_fds=(owner,), start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            os.close(owner)

    def stop(self) -> None:
        try:
            _stop(self.bin, self.root, self.as_postgres)
        finally:
            if self.watchdog is not None:
                self.watchdog.terminate()
                self.watchdog.wait(timeout=60)


def _run_as(as_postgres: bool, *args: str) -> None:
    prefix = ["runuser", "-u", "postgres", "--"] if as_postgres else []
    done = subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr.strip() or done.stdout.strip()}")


def halt_server(bin_dir: Path, root: Path, as_postgres: bool) -> None:
    """Stop the server of the cluster under `root` (immediate: clients see the connection drop)."""
    _run_as(as_postgres, str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w", "stop")


def _stop(bin_dir: Path, root: Path, as_postgres: bool) -> None:
    """Stop the cluster under `root` (if its server runs) and remove the folder."""
    try:
        if (root / "data" / "postmaster.pid").exists():
            halt_server(bin_dir, root, as_postgres)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # another user's process: alive
        return True
    return True


def reap_stale_clusters(bin_dir: Path) -> list[Path]:
    """Stop and remove every cluster under the temporary folder whose owner process is gone (its
    watchdog was killed too); a folder without an owner file is not this module's and is left alone."""
    reaped = []
    for owner in Path(tempfile.gettempdir()).glob(f"{PREFIX}*/{_OWNER}"):
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            try:
                _stop(bin_dir, owner.parent, os.geteuid() == 0)
            except (RuntimeError, subprocess.SubprocessError):
                continue
            reaped.append(owner.parent)
    return reaped


def _watchdog(owner_fd: int, bin_dir: Path, root: Path, as_postgres: bool) -> None:
    """Wait until the owner exits (its pidfd turns readable), then stop its cluster. SIGTERM (the
    owner's own stop) ends the wait without stopping anything."""
    poller = select.poll()
    poller.register(owner_fd, select.POLLIN)
    poller.poll()
    _stop(bin_dir, root, as_postgres)


if __name__ == "__main__":
    _watchdog(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1")
