"""Reconstruction galleries: the worst case chosen per entry and track, copied beside the entry
with its digest, checked by validate, and shown on the page from the entries alone."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torchvision.utils import save_image

from bench.leaderboard.gallery import worst_grids
from bench.results.store import ResultStore
from tests.support.result_samples import job


def grid(path: Path, value: float) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_image(torch.full((2, 1, 8, 8), value), path, nrow=1)
    return path.read_bytes()


@pytest.fixture
def run(tmp_path: Path) -> tuple[list, Path]:
    """Two seeds of one defense with two attacks each; the grids of three outcomes exist."""
    jobs = [
        job("img", "server", "noise", 0, {"dlg": 0.4, "ig": 0.7}, 0.9, 0.5),
        job("img", "server", "noise", 1, {"dlg": 0.9, "ig": 0.2}, 0.9, 0.5),
        job("img", "server", "none", 0, {"dlg": 0.95, "ig": 0.99}, 0.9, 0.5),
    ]
    out = tmp_path / "runs"
    grid(out / "reconstructions" / jobs[0].key / "server_ig.png", 0.3)
    grid(out / "reconstructions" / jobs[0].key / "server_dlg.png", 0.6)
    grid(out / "reconstructions" / jobs[2].key / "server_dlg.png", 0.9)  # ig's grid is absent
    return jobs, out


def test_the_worst_case_with_a_grid_is_chosen(run: tuple[list, Path]) -> None:
    jobs, out = run
    chosen = worst_grids(jobs, out)
    # noise: seed 1's dlg (0.9) has no grid, so seed 0's ig (0.7); none: ig has no grid, so dlg
    assert chosen[("img/server", "noise")][1:] == ("ig", 0)
    assert chosen[("img/server", "none")][1:] == ("dlg", 0)
    assert worst_grids(jobs, None) == {}


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_export_validate_build_with_images(run: tuple[list, Path], tmp_path: Path) -> None:
    jobs, out = run
    store = tmp_path / "runs" / "results.sqlite"
    with ResultStore(str(store)) as s:
        for r in jobs:
            s.add(r)
    entries, site = tmp_path / "entries", tmp_path / "site"
    done = bench(
        "leaderboard",
        "export",
        "--store",
        str(store),
        "--entries",
        str(entries),
        "--task",
        "img",
        "--allow-uncommitted",
    )
    assert done.returncode == 0, done.stderr  # --out defaults to the store's folder
    image = entries / "quick" / "images" / "noise" / "img_server.png"
    assert image.read_bytes() == (out / "reconstructions" / jobs[0].key / "server_ig.png").read_bytes()
    assert bench("leaderboard", "build", "--entries", str(entries), "--site", str(site)).returncode == 0
    page = (site / "index.html").read_text()
    assert page.count('<img src="images/') == 2 and "worst-case reconstruction of noise by ig" in page
    assert len(list((site / "images").glob("*.png"))) == 2
    assert "img-src 'self'" in page
    image.write_bytes(grid(tmp_path / "other.png", 0.1))  # tampered
    bad = bench("leaderboard", "validate", "--entries", str(entries))
    assert bad.returncode == 2 and "does not have the recorded sha256" in bad.stderr
    image.unlink()
    bad = bench("leaderboard", "build", "--entries", str(entries), "--site", str(site))
    assert bad.returncode == 2 and "img_server.png is missing" in bad.stderr and "Traceback" not in bad.stderr


def test_png_size_is_read_for_the_img_box() -> None:
    from bench.leaderboard.site.render import _png_size

    buf = io.BytesIO()
    save_image(torch.zeros(3, 1, 8, 8), buf, format="png", nrow=3)
    assert _png_size(buf.getvalue()) == (3 * 8 + 4 * 2, 8 + 2 * 2)


@pytest.mark.slow
def test_a_symlinked_non_png_or_huge_image_is_refused(run: tuple[list, Path], tmp_path: Path) -> None:
    """Issue 39 item 7: a gallery image that is a symbolic link (``build`` would copy its target
    into the public site), not a PNG, or 100 000 pixels a side is an input error naming it."""
    jobs, _ = run
    store = tmp_path / "runs" / "results.sqlite"
    with ResultStore(str(store)) as s:
        for r in jobs:
            s.add(r)
    entries = tmp_path / "entries"
    args = ("--store", str(store), "--entries", str(entries), "--task", "img", "--allow-uncommitted")
    assert bench("leaderboard", "export", *args).returncode == 0
    (entry,) = (entries / "quick").glob("noise*.json")
    image = entries / "quick" / "images" / "noise" / "img_server.png"
    data = json.loads(entry.read_text())
    outside = tmp_path / "secret.png"
    outside.write_bytes(image.read_bytes())  # the same bytes: the recorded hash matches
    big = bytearray(image.read_bytes())
    big[16:24] = (100_000).to_bytes(4, "big") * 2  # the header of a 100 000 × 100 000 PNG
    cases = {
        "symbolic link": lambda: (image.unlink(), image.symlink_to(outside)),
        "not a PNG": lambda: image.write_bytes(b"GIF89a" + bytes(40)),
        "100000 × 100000 pixels": lambda: image.write_bytes(bytes(big)),
    }
    original = image.read_bytes()
    for why, make in cases.items():
        if image.is_symlink():
            image.unlink()
        image.write_bytes(original)
        make()
        data["galleries"]["img/server"]["sha256"] = hashlib.sha256(image.read_bytes()).hexdigest()
        entry.write_text(json.dumps(data))
        bad = bench("leaderboard", "build", "--entries", str(entries), "--site", str(tmp_path / "site"))
        assert bad.returncode == 2 and why in bad.stderr and "Traceback" not in bad.stderr, why


def test_a_grid_is_shown_as_labelled_pairs_of_truth_and_reconstruction() -> None:
    """Issue 38 item 5: the harness writes truth and reconstruction rows alternating; the page
    shows one row per victim, the truth left and its reconstruction right, under two labels."""
    import numpy as np
    from PIL import Image

    from bench.leaderboard.site.pairs import GAP, labelled_pairs

    truth = [torch.full((2, 1, 8, 8), 0.2 + 0.1 * v) for v in range(3)]
    recon = [torch.full((2, 1, 8, 8), 0.25 + 0.1 * v) for v in range(3)]
    buf = io.BytesIO()
    tiles = [t for pair in zip(truth, recon, strict=True) for t in pair]
    save_image(torch.cat(tiles), buf, format="png", nrow=2, padding=2, pad_value=1.0)
    laid = labelled_pairs(buf.getvalue())
    assert laid is not None
    data, pairs = laid
    im = np.asarray(Image.open(io.BytesIO(data)).convert("L")).astype(int)
    assert pairs == 3 and im.shape == (3 * 10 + 2, 2 * 22 + GAP)
    for v in range(3):
        y = v * 10 + 2 + 4  # the middle of victim v's row
        left, right = im[y, 2 + 4], im[y, 22 + GAP + 2 + 4]
        assert (
            abs(left - round(255 * (0.2 + 0.1 * v))) <= 1 and abs(right - round(255 * (0.25 + 0.1 * v))) <= 1
        )
    assert labelled_pairs(b"not a png") is None
