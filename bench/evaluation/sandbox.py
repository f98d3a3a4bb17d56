"""The operating-system sandbox of the processes that run defense code.

A simulation process and a defense oracle's process each run the defense's code. Separate
processes already keep their objects, module globals and class attributes apart; what they would
still share is the machine: files, sockets, System V IPC. A child that runs defense code therefore
enters a sandbox of its own before the first request (:func:`enter`), with the kernel's
unprivileged mechanisms:

* **Landlock** (Linux ≥ 5.13; ``landlock(7)``): the process may *write* only inside a private
  scratch folder made for it, and *read* only the system's folders (:data:`SYSTEM_FOLDERS`), its
  own folder of ``/proc``, Python's own paths, the ``bench`` package, the benchmark root's plugin
  and task folders and the data folders (:func:`readable_roots`) — not another process's
  scratch, not ``/tmp``, not the users' folders where a results store or spool lives, and not
  ``/proc/<pid>`` of any other process, so not the parent's command line. TCP
  ``bind``/``connect`` are denied (ABI ≥ 4); abstract Unix sockets and signals cannot reach a
  process outside the sandbox (ABI ≥ 6). A Landlock domain cannot be left,
  and ``ptrace`` (so ``/proc/<pid>/mem``) of a process outside it is denied.
* **Namespaces** (where the process may create them, e.g. as root): a network namespace of its
  own (no interface but a loopback that is down: no UDP or TCP to a sibling) and an IPC namespace
  (no System V shared memory or message queue in common).

Temporary files of libraries (``TMPDIR``, PyTorch's inductor cache, Matplotlib's config) are
pointed into the scratch folder first. Where the kernel has no Landlock, :func:`enter` answers
``"none"`` and the process runs unsandboxed; the answer is part of the job's provenance.

The parent's secrets live beneath ``/tmp``, the one top-level folder a sandboxed process may not
read: :func:`parent_secret` keeps them in ``/tmp/bench-secrets-<uid>`` (a 0700 folder of this
user), and a readable root that would contain that folder (``/tmp`` itself on ``sys.path``) is
left out (:func:`readable_roots`). The spool's key (:mod:`bench.results.spool`) is one.

Not covered: a pathname Unix socket in one process's scratch folder, connected to by a process
that knows its path (Landlock has no rule for ``connect`` on a path before ABI 7's scopes).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38
_O_PATH = 0o10000000

# filesystem access rights (landlock.h)
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

#: the sandbox this process entered (``None``: none yet)
_entered: str | None = None

#: the one top-level folder a sandboxed process may not read (its scratch folder aside)
UNREADABLE = Path("/tmp")
#: this user's parent-only secrets (:func:`parent_secret`)
SECRETS_DIR = UNREADABLE / f"bench-secrets-{os.getuid()}"


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


#: the top-level folders of the system a sandboxed process may read (programs, libraries,
#: configuration, devices, the kernel's ``/sys``); not the users' folders (``/root``, ``/home``,
#: ``/work`` …), where a results store or a spool may live
SYSTEM_FOLDERS = (
    "bin",
    "dev",
    "etc",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "nix",
    "opt",
    "run",
    "sbin",
    "snap",
    "sys",
    "usr",
)
#: the folders of a benchmark root a sandboxed process may read: the plugins and the task specs
#: (not the root itself, which may hold ``runs/``, a store or the leaderboard's entries)
ROOT_FOLDERS = ("defenses", "tasks")


def readable_roots(extra: Iterable[str | Path] = ()) -> list[Path]:
    """What a sandboxed process may read: the system's folders (:data:`SYSTEM_FOLDERS`), of
    ``/proc`` its own process's folder and the kernel's files (not another process's folder, so
    not the parent's command line), Python's prefixes and its path (but no folder holding a
    benchmark root: a store may be in it), the ``bench`` package, the data folders (``BENCH_DATA``,
    ``~/.cache/bench``) and, of each benchmark root in ``extra``, its plugin and task folders
    (:data:`ROOT_FOLDERS`)."""
    import bench

    roots = [Path("/") / name for name in SYSTEM_FOLDERS]
    roots += _proc_entries()
    benchmark = [Path(p).resolve() for p in extra if p]
    on_path = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p]
    roots += [p for p in on_path if not any(r.is_relative_to(p.resolve()) for r in benchmark if p.exists())]
    roots += [Path(bench.__file__).resolve().parent]
    roots += [Path(p) for p in (os.environ.get("BENCH_DATA"), Path.home() / ".cache" / "bench") if p]
    roots += [r / name for r in benchmark for name in ROOT_FOLDERS]
    # a root holding the parent's secrets (``/tmp`` on sys.path, a link to it) is left out
    return [p for p in roots if p.exists() and not SECRETS_DIR.is_relative_to(p.resolve())]


def _proc_entries() -> list[Path]:
    """Of ``/proc``: this process's own folder and every entry that is not a process's folder."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    own = proc / str(os.getpid())
    return [own, *(proc / name for name in os.listdir(proc) if not name.isdigit())]


def parent_secret(name: str, create: bool) -> bytes | None:
    """This user's random 32-byte secret ``name``, kept in :data:`SECRETS_DIR` (module docstring).

    Only the parent calls this, and only when it needs the secret: children are forked from the
    fork server (:mod:`bench.evaluation.isolation`), which never holds it, and a sandboxed child can
    neither read the folder nor ``ptrace`` the parent. Returns ``None`` when there is no such
    secret and ``create`` is false; with ``create`` a new one is made (two processes making it
    at once end up with the same one: the first is never replaced).

    Raises
    ------
    OSError
        When the folder or the file is not this user's private one (a link, another owner,
        readable by others): another account could know the secret, so it is not used.
    """
    if create:
        SECRETS_DIR.mkdir(mode=0o700, exist_ok=True)
    try:
        _check_private(os.lstat(SECRETS_DIR), SECRETS_DIR, stat.S_ISDIR)
        return _read_secret(SECRETS_DIR / name)
    except FileNotFoundError:
        if not create:
            return None
    fd, tmp = tempfile.mkstemp(dir=SECRETS_DIR, prefix=".new-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, SECRETS_DIR / name)  # never replaces one made meanwhile
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return _read_secret(SECRETS_DIR / name)


def _check_private(info: os.stat_result, path: Path, kind: Callable[[int], bool]) -> None:
    if not kind(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{path} is not a private {'folder' if kind is stat.S_ISDIR else 'file'} of this user")


def _read_secret(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_private(os.fstat(fd), path, stat.S_ISREG)
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    if len(data) != 32:
        raise OSError(f"{path} is not a bench secret ({len(data)} bytes)")
    return data


#: a sandboxed process's scratch folder is ``<tmp>/bench-<pid>-<role>-<random>``
SCRATCH_PREFIX = "bench-"


def remove_scratch(pid: int | None) -> None:
    """Parent side, once the child ``pid`` has ended: remove the scratch folders it made
    (:func:`enter`; a scratch folder lives as long as its process, so nothing a sandboxed
    process wrote survives it). ``shutil.rmtree`` removes links the child left without
    following them."""
    if pid is None:
        return
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{int(pid)}-*"):
        shutil.rmtree(path, ignore_errors=True)


def sweep_scratch() -> int:
    """Remove the scratch folders of processes that have ended without their parent seeing it
    (:func:`remove_scratch` never ran: the workers of a Ray worker that Ray ended, a parent
    killed outright); a folder whose process still runs is left alone. Returns how many went."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def enter(role: str, readable: Iterable[str | Path] = ()) -> str:
    """Sandbox this process for good (module docstring); idempotent. Returns what was entered:
    ``"landlock+netns"``, ``"landlock"`` or ``"none"`` (no Landlock in this kernel)."""
    global _entered
    if _entered is not None:
        return _entered
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{role}-"))
    for var in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR"):
        os.environ[var] = str(scratch)
    tempfile.tempdir = str(scratch)
    abi = landlock_abi()
    if abi < 1:
        _entered = "none"
        return _entered
    namespaces = _unshare()
    _restrict(abi, readable_roots(readable), [scratch])
    _entered = "landlock+netns" if namespaces else "landlock"
    return _entered


def _unshare() -> bool:
    try:
        os.unshare(os.CLONE_NEWNET | os.CLONE_NEWIPC)
    except (OSError, AttributeError):
        return False
    return True


def _restrict(abi: int, read: list[Path], write: list[Path]) -> None:
    libc = _libc()
    fs = _fs_rights(abi)
    attr = _RulesetAttr(fs, (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0, 0)
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, rights in ((read, _READ), (write, fs)):
            for path in paths:
                _add_path(libc, ruleset, path, rights if path.is_dir() else rights & ~_READ_DIR)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)


def _add_path(libc: ctypes.CDLL, ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone or unreadable: nothing to allow
    try:
        rule = _PathBeneathAttr(rights, fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
