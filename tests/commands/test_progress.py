"""Quiet, useful output: on a terminal ``evaluate`` shows one progress bar for the sweep (the
job running, the ETA); redirected, it prints one line per finished job; never Lightning's
per-job bars unless ``--verbose``."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.support import bench_root
from tests.support.bench_root import REPO, evaluate_argv, tiny_task

TASK = tiny_task(nodes=6, n_test=50, lr=None, rounds=30, eval_every=10)


def make_root(tmp_path: Path) -> Path:
    return bench_root.make_root(tmp_path, [TASK], {"quick": {"tasks": ["tiny"], "seeds": 2}})


def command(tmp_path: Path, root: Path, name: str) -> list[str]:
    out = tmp_path / name
    return [sys.executable, "-m", "bench", *evaluate_argv(root, out, out / "site")]


def run(tmp_path: Path, *extra: str) -> str:
    cmd = command(tmp_path, make_root(tmp_path), f"out{len(extra)}")
    done = subprocess.run(
        [*cmd, *extra],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_redirected_output_is_one_line_per_job(tmp_path):
    text = run(tmp_path)
    assert "[1/2] tiny | none | seed 0: ok in" in text and "[2/2] tiny | none | seed 1: ok in" in text
    assert "Epoch" not in text and "it/s" not in text and "\r" not in text
    assert len(text.splitlines()) < 30


def test_verbose_shows_each_simulations_bar(tmp_path):
    assert "Epoch" in run(tmp_path, "--verbose")


def test_a_terminal_gets_one_bar_for_the_sweep(tmp_path):
    cmd = command(tmp_path, make_root(tmp_path), "tty")
    pid, fd = pty.fork()
    if pid == 0:  # the child: a 160-column terminal
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        os.environ["PYTHONPATH"] = str(REPO)
        os.execv(sys.executable, cmd)
    chunks = []
    try:
        while data := os.read(fd, 65536):
            chunks.append(data)
    except OSError:  # the terminal closes when the child exits
        pass
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    frames = [f for f in text.replace("\r", "\n").split("\n") if f.startswith("jobs:")]
    assert frames and "2/2" in frames[-1] and "tiny | none | seed" in frames[-1]
    assert "Epoch" not in text and "[1/2]" not in text  # no Lightning bars, no per-job lines
