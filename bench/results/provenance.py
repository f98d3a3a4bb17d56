"""Provenance of a result: what code, packages and machine produced it.

Every stored job carries :func:`provenance` so that a number on the leaderboard can be traced
back to a commit, a set of package versions and a device, and :func:`spec_hash` so that two
runs of the same specification are recognised as such.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "cpu_model", "git_state", "package_versions", "provenance", "spec_hash"]

#: Distributions whose versions are recorded (``python`` is the interpreter).
PACKAGES: tuple[str, ...] = ("bench", "torch", "pytorch_lightning", "torchmetrics", "numpy", "opacus")

REPO_ROOT = Path(__file__).resolve().parents[2]
_GIT_TIMEOUT_S = 10.0


def spec_hash(obj: Any) -> str:
    """Short SHA-256 of a JSON-able object's canonical JSON.

    Parameters
    ----------
    obj:
        Anything :func:`json.dumps` accepts (dicts, lists, strings, numbers, booleans, None).

    Returns
    -------
    str
        The first 16 hex characters of the SHA-256 of ``json.dumps(obj, sort_keys=True,
        separators=(",", ":"))``: equal objects hash equally whatever their key order.

    Raises
    ------
    TypeError
        If ``obj`` is not JSON-serializable.
    """
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def git_output(*args: str, cwd: Path) -> str | None:
    """``git *args`` run in ``cwd``: its stripped standard output, or ``None`` when git is
    missing, fails or outlasts :data:`_GIT_TIMEOUT_S`."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path = REPO_ROOT, ignore: Path | None = None) -> dict[str, Any]:
    """The commit and dirtiness of the repository that holds this package.

    Parameters
    ----------
    root:
        The repository root expected to hold ``bench`` (the folder above the package). When
        git is missing or ``root`` is not the top of a git work tree (an installed package),
        the commit is ``"unknown"``.
    ignore:
        A folder inside ``root`` whose changes do not count (what is being written: the
        leaderboard entries an export replaces).

    Returns
    -------
    dict
        ``{"commit": str, "dirty": bool | None}``; ``dirty`` (tracked changes or untracked files
        not ignored by ``.gitignore``) is ``None`` when unknown.
    """
    unknown: dict[str, Any] = {"commit": "unknown", "dirty": None}
    if not root.is_dir():
        return unknown
    top = git_output("rev-parse", "--show-toplevel", cwd=root)
    if top is None or Path(top).resolve() != root.resolve():
        return unknown
    commit = git_output("rev-parse", "HEAD", cwd=root)
    if not commit:
        return unknown
    # untracked files count: a new defense plugin or task not yet committed changes results
    spec = (
        ["--", ".", f":(exclude){ignore.resolve().relative_to(root.resolve())}"]
        if _inside(ignore, root)
        else []
    )
    status = git_output("status", "--porcelain", "--untracked-files=normal", *spec, cwd=root)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _inside(path: Path | None, root: Path) -> bool:
    return (
        path is not None
        and path.resolve() != root.resolve()
        and path.resolve().is_relative_to(root.resolve())
    )


def _version(dist: str) -> str | None:
    for name in (dist, dist.replace("_", "-"), dist.replace("-", "_")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (``None`` when absent) and of Python."""
    versions: dict[str, str | None] = {name: _version(name) for name in PACKAGES}
    versions["python"] = platform.python_version()
    return versions


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name`` on Linux, else what
    :func:`platform.processor` knows, else the architecture)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def provenance(spec_hash: str, seed: int, device: str) -> dict[str, Any]:
    """Everything needed to trace a result back to the code and machine that produced it.

    Parameters
    ----------
    spec_hash:
        Hash of the job's specification (:func:`spec_hash`).
    seed:
        The job's seed.
    device:
        The device it ran on, e.g. ``"cpu"`` or ``"cuda:0 (NVIDIA H100)"``.

    Returns
    -------
    dict
        JSON-able: ``commit``, ``dirty``, ``packages`` (name → version), ``platform``,
        ``machine`` (architecture), ``cpu`` (model name), ``cpus`` (logical CPUs), ``threads``
        (PyTorch's intra-op threads), ``isa`` (the vector instruction set of PyTorch's CPU
        kernels on this CPU), ``torch_build`` (``torch.__version__`` with
        its local build tag, e.g. ``+cpu``/``+cu130``), ``spec_hash``, ``seed``, ``device`` and
        ``timestamp`` (UTC, ISO 8601).
    """
    import torch

    git = git_state()
    return {
        "commit": git["commit"],
        "dirty": git["dirty"],
        "packages": package_versions(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count() or 0,
        "threads": torch.get_num_threads(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "torch_build": torch.__version__,
        "spec_hash": spec_hash,
        "seed": int(seed),
        "device": str(device),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
    }
