"""A throwaway PostgreSQL server for the tests, from the binaries of Debian's ``postgresql`` package.

:class:`PostgresServer` makes a cluster in a fresh temporary directory (``initdb``: trust auth, UTF8, locale C,
no fsync), starts it on a free TCP port of 127.0.0.1 (and a unix socket in that directory) with the settings of a
fast disposable server, waits until it accepts connections, and on exit stops it (``pg_ctl stop -m immediate``)
and removes the directory, also when the code inside the ``with`` raised. PostgreSQL refuses to run as root: as
root the server runs as the ``postgres`` account (Debian's package makes it), else as ``jetmem-pg``, created here
with ``useradd --system``; as anyone else it runs as that user.

``postgres_server`` is a session-scoped fixture: one server per test session, so one per pytest-xdist worker.
The repository's root conftest.py imports it, once: a session-scoped fixture that test modules imported each would
be one fixture per module, and start one server per module. The function has another name than the fixture, so
that a test's ``postgres_server`` parameter does not shadow an import (ruff's F811).

Without the binaries, psycopg 3 or an account to run as, the fixture skips saying how to get them; with
``JETMEM_TEST_POSTGRES=required`` (CI sets it) it fails with that reason instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import pytest

ENV_MODE = "JETMEM_TEST_POSTGRES"
"""``required``: a PostgreSQL test whose server cannot be had fails instead of skipping. Unset or empty: skips."""
SUPERUSER = "postgres"
"""The cluster's superuser (``initdb -U``); every URL connects as it, with trust auth."""
ROOT_ACCOUNTS = ("postgres", "jetmem-pg")
"""The unprivileged accounts a root session runs the server as, the first that exists; else the last is created."""
BINARIES = ("initdb", "pg_ctl", "postgres")
INSTALL_SERVER = "install PostgreSQL's server binaries with `apt-get install postgresql` (Debian/Ubuntu)"
INSTALL_DRIVER = "install psycopg 3 with `pip install 'psycopg[binary]>=3.1.8'` (the dev extra has it)"
DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
START_TIMEOUT_S = 60
PORT_TRIES = 5

# A disposable server: nothing needs to survive a crash, so no fsync, no full-page writes, no synchronous commit.
# Dynamic shared memory in files of the data directory, not /dev/shm, which a container may keep at 64 MiB.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "100",
    "shared_buffers": "32MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "dynamic_shared_memory_type": "mmap",
    "jit": "off",
    "log_min_messages": "warning",
}


class PostgresUnavailable(RuntimeError):
    """What a PostgreSQL server needs here is missing (binaries, psycopg, an account to run it as); says how to fix."""


class PostgresError(RuntimeError):
    """The server was there to start but did not start (or stop); the message holds the end of its log."""


def _version_key(path: Path) -> tuple[int, ...]:
    """``/usr/lib/postgresql/15/bin`` -> ``(15,)``; ``9.6`` -> ``(9, 6)``; anything else sorts last."""
    parts = path.parent.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (-1,)


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) and (directory / name).is_file() for name in BINARIES)


def find_postgres_bin(root: Path = Path("/usr/lib/postgresql")) -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: ``root/*/bin`` newest version first, then
    the directory of ``pg_ctl`` on PATH (or, when that is a link, of its target). ``None`` where there is none."""
    for candidate in sorted(root.glob("*/bin"), key=_version_key, reverse=True):
        if _has_binaries(candidate):
            return candidate
    on_path = shutil.which("pg_ctl")
    if on_path is None:
        return None
    for candidate in (Path(on_path).parent, Path(on_path).resolve().parent):
        if _has_binaries(candidate):
            return candidate
    return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a reparented postmaster may linger as one in a container
    whose PID 1 does not reap)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return fields[0] not in ("Z", "X")


def _free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listened on a moment ago (the start retries if it is taken by then)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _root_account() -> pwd.struct_passwd:
    """The unprivileged account a root session runs the server as: an existing one of ``ROOT_ACCOUNTS``, else
    ``jetmem-pg`` made with ``useradd --system``. Raises :class:`PostgresUnavailable` when none can be had."""
    for name in ROOT_ACCOUNTS:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    name = ROOT_ACCOUNTS[-1]
    command = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
               "--shell", "/usr/sbin/nologin", name]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        detail = done.stderr.strip()
    except FileNotFoundError:
        detail = "useradd not found"
    with contextlib.suppress(KeyError):  # made now, or by a concurrent xdist worker whose useradd won the race
        return pwd.getpwnam(name)
    raise PostgresUnavailable(
        f"PostgreSQL refuses to run as root, and no unprivileged account to run it as: none of "
        f"{', '.join(ROOT_ACCOUNTS)} exists and `{' '.join(command)}` failed ({detail}); create one of them, "
        f"or run the tests as a non-root user"
    )


def _check_reachable(directory: Path, uid: int, gid: int) -> None:
    """Raises :class:`PostgresUnavailable` when user ``uid`` cannot traverse a parent of ``directory`` (a root
    TMPDIR such as /root/tmp, mode 0700), which initdb would report far less clearly."""
    for parent in directory.parents:
        st = parent.stat()
        mode = st.st_mode
        owner, group = st.st_uid == uid and mode & stat.S_IXUSR, st.st_gid == gid and mode & stat.S_IXGRP
        if mode & stat.S_IXOTH or owner or group:
            continue
        raise PostgresUnavailable(
            f"the PostgreSQL server's account (uid {uid}) cannot enter {parent} (mode {stat.filemode(mode)}), a "
            f"parent of its data directory {directory}; point TMPDIR at a directory it can reach, such as /tmp"
        )


def _conf_value(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class PostgresServer:
    """A PostgreSQL cluster in a temporary directory, running while the ``with`` block runs (or from :meth:`start`
    to :meth:`stop`). ``url``: ``postgresql://postgres@127.0.0.1:PORT/postgres``.

    Raises :class:`PostgresUnavailable` when the binaries, psycopg or an account to run as are missing, and
    :class:`PostgresError` when the server does not start; either way nothing is left running or on disk.
    """

    def __init__(self, bin_dir: Path | None = None, tmp_root: Path | None = None) -> None:
        """``bin_dir``: where ``initdb``/``pg_ctl``/``postgres`` are (default: :func:`find_postgres_bin`);
        ``tmp_root``: the directory to make the cluster's directory in (default: the system's temp dir)."""
        self.bin_dir = bin_dir
        self.tmp_root = tmp_root
        self.directory: Path | None = None
        self.port = 0
        self.pid = 0
        self.startup_s = 0.0
        """Seconds from nothing to a server that accepted a connection (initdb included)."""
        self._account: pwd.struct_passwd | None = None

    # --- the URLs -------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The ``postgres`` database's URL, as the superuser, over TCP."""
        return self.database_url("postgres")

    @property
    def socket_dir(self) -> Path:
        """The directory of the server's unix socket (``host=`` of a libpq connection string)."""
        return self._dir() / "sock"

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` on this server (which may not exist)."""
        if not self.port:
            raise PostgresError("the PostgreSQL server is not running: start it (PostgresServer.start) first")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def new_database(self, name: str) -> str:
        """Creates database ``name`` (lower-case letters, digits, ``_``; at most 63; not starting with a digit)
        and returns its URL. An existing name raises psycopg's ``DuplicateDatabase``."""
        if not DATABASE_NAME.fullmatch(name):
            raise ValueError(f"new_database: name {name!r} must match {DATABASE_NAME.pattern} (a plain identifier)")
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.database_url(name)

    # --- life cycle -----------------------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        """Starts the server unless :meth:`start` already did."""
        if self.directory is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """initdb, start, wait until a connection succeeds. On any failure it cleans up and raises."""
        if self.directory is not None:
            raise PostgresError(f"the PostgreSQL server in {self.directory} is already started")
        began = time.perf_counter()
        bin_dir = self._prerequisites()
        self._account = _root_account() if os.geteuid() == 0 else None
        self.directory = Path(tempfile.mkdtemp(prefix="jetmem-pg-", dir=self.tmp_root))
        atexit.register(self.stop)
        try:
            self._make_cluster(bin_dir)
            self._start_on_a_free_port(bin_dir)
            self._wait_for_connection()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - began

    def stop(self) -> None:
        """Stops the server (immediate shutdown; SIGKILL if that fails) and removes its directory. Idempotent."""
        if self.directory is None:
            return
        atexit.unregister(self.stop)
        try:
            if self.bin_dir is not None and (self.directory / "data" / "postmaster.pid").exists():
                self._pg_ctl(self.bin_dir, "stop", "-m", "immediate", "-t", "30", check=False)
            pid = self.pid or self._postmaster_pid()
            if pid and pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
            self.port = 0

    # --- the steps ------------------------------------------------------------------------------------------

    def _dir(self) -> Path:
        if self.directory is None:
            raise PostgresError("the PostgreSQL server is not running: start it (PostgresServer.start) first")
        return self.directory

    def _prerequisites(self) -> Path:
        """The binaries' directory; raises :class:`PostgresUnavailable` naming what is missing and how to get it."""
        missing = []
        if self.bin_dir is None:
            self.bin_dir = find_postgres_bin()
        if self.bin_dir is None or not _has_binaries(self.bin_dir):
            where = self.bin_dir or "/usr/lib/postgresql/*/bin or on PATH"
            missing.append(f"no PostgreSQL server binaries ({', '.join(BINARIES)}) in {where}: {INSTALL_SERVER}")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            missing.append(f"psycopg 3 is not importable: {INSTALL_DRIVER}")
        if missing or self.bin_dir is None:
            raise PostgresUnavailable("; ".join(missing))
        return self.bin_dir

    def _run(self, *command: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs ``command`` as the server's account, in its directory, without the caller's PG* variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}
        account = self._account
        if account is not None:
            env["HOME"] = str(self._dir())
        done = subprocess.run(
            [str(c) for c in command], cwd=self._dir(), env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, check=False,
            user=account and account.pw_uid, group=account and account.pw_gid, extra_groups=account and [],
        )  # fmt: skip
        if check and done.returncode != 0:
            said = f"{done.stdout}{done.stderr}{self._log_tail()}"
            raise PostgresError(f"`{' '.join(map(str, command))}` exited {done.returncode}:\n{said}")
        return done

    def _pg_ctl(self, bin_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(bin_dir / "pg_ctl", *args, "-D", self._dir() / "data", "-w", "-s", check=check)

    def _make_cluster(self, bin_dir: Path) -> None:
        """initdb into ``data/`` and the settings of a disposable server; the directory belongs to the account."""
        directory = self._dir()
        self.socket_dir.mkdir()
        if self._account is not None:
            _check_reachable(directory, self._account.pw_uid, self._account.pw_gid)
            for path in (directory, self.socket_dir):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)
        self._run(
            bin_dir / "initdb", "-D", directory / "data", "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        settings = SETTINGS | {"unix_socket_directories": str(self.socket_dir)}
        lines = [f"{key} = {_conf_value(value)}" for key, value in settings.items()]
        with (directory / "data" / "postgresql.conf").open("a") as conf:  # later lines win
            conf.write("\n# pytest-jetmem's test server\n" + "\n".join(lines) + "\n")

    def _start_on_a_free_port(self, bin_dir: Path) -> None:
        """``pg_ctl start`` on a free port, again on another if a concurrent process took it first."""
        log = self._dir() / "server.log"
        for _ in range(PORT_TRIES):
            port = _free_port()
            done = self._pg_ctl(
                bin_dir, "start", "-t", str(START_TIMEOUT_S), "-l", str(log), "-o", f"-p {port}", check=False
            )
            if done.returncode == 0:
                self.port = port
                self.pid = self._postmaster_pid()
                return
            if "could not bind" not in self._log_tail():
                break
        raise PostgresError(f"PostgreSQL did not start (pg_ctl start):\n{done.stdout}{done.stderr}{self._log_tail()}")

    def _wait_for_connection(self) -> None:
        """Until a psycopg connection to ``postgres`` succeeds (pg_ctl -w already waited for "ready")."""
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    raise PostgresError(f"PostgreSQL on port {self.port} accepts no connection: {e}") from e
                time.sleep(0.05)

    def _postmaster_pid(self) -> int:
        """The postmaster's pid from ``data/postmaster.pid``; 0 without one."""
        try:
            return int((self._dir() / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return 0

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = (self._dir() / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n--- server.log (end) ---\n" + "\n".join(text.splitlines()[-lines:])


def skip_or_fail(reason: str) -> NoReturn:
    """Skips the test with ``reason``; fails it instead under ``JETMEM_TEST_POSTGRES=required``."""
    mode = os.environ.get(ENV_MODE, "")
    if mode == "required":
        pytest.fail(f"{reason} ({ENV_MODE}=required: PostgreSQL tests must run)", pytrace=False)
    if mode:
        pytest.fail(f"{ENV_MODE}={mode!r}: expected 'required' or unset", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", name="postgres_server")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    """One running :class:`PostgresServer` for the session (for the xdist worker); skips (or fails, see
    :func:`skip_or_fail`) when what it needs is missing, errors when the server does not start."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as e:
        skip_or_fail(str(e))
    try:
        yield server
    finally:
        server.stop()
