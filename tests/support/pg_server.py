"""A throw-away PostgreSQL server for the store tests, from Debian's ``postgresql`` package.

``initdb`` makes a cluster in a temporary folder and ``pg_ctl`` starts it listening on a Unix
socket only (no TCP port, nothing reachable from outside), with ``trust`` authentication for the
``postgres`` role. PostgreSQL refuses to run as root: as root, the server runs as the ``postgres``
system user the package creates (``runuser``), otherwise as the current user. Everything is removed
when the context ends.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` (the newest installed version), or ``None``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _as_owner(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server; yields the SQLAlchemy URL of an empty database ``bench`` (psycopg 3)."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data, sock = tmp / "data", tmp / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres")
        shutil.chown(sock, "postgres")
    run = lambda *a: subprocess.run(_as_owner([str(x) for x in a]), check=True, capture_output=True)  # noqa: E731
    try:
        run(bin_dir / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-c listen_addresses='' -k {sock} -c fsync=off"
        run(bin_dir / "pg_ctl", "-D", data, "-o", options, "-l", tmp / "log", "-w", "start")
        run(bin_dir / "createdb", "-h", sock, "-U", "postgres", "bench")
        yield f"postgresql+psycopg://postgres@/bench?host={sock}"
    finally:
        subprocess.run(
            _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)
