"""A reconstruction grid laid out as labelled pairs for the page: one row per victim, the ground
truth on the left and the reconstruction on the right.

The harness writes each grid with truth and reconstruction rows alternating
(:func:`bench.metrics.image.save_grid`: square tiles, ``padding`` white pixels around each).
Shown as is, a reader cannot tell which row is which. :func:`labelled_pairs` finds the tile
period ``T`` from the white padding bands (the smallest ``T`` whose bands are white in both
directions and which gives an even number of rows), cuts the rows and puts each truth row beside
its reconstruction, so that the page can label the two columns once. A grid whose layout is not
found is shown as it was written.
"""

from __future__ import annotations

from io import BytesIO

import numpy as np

#: padding of :func:`bench.metrics.image.save_grid`
PADDING = 2
#: white pixels between the truth and the reconstruction columns
GAP = 6


def _bands(white: np.ndarray, period: int, padding: int) -> bool:
    """Whether the lines ``k·period … k·period + padding − 1`` are all white."""
    return bool(all(white[k : k + padding].all() for k in range(0, len(white) - padding + 1, period)))


def tile_period(pixels: np.ndarray, padding: int = PADDING) -> int | None:
    """The period ``T`` (tile side + padding) of a grid ``[H, W, 3]``, or ``None``."""
    h, w = pixels.shape[:2]
    white = pixels.min(axis=2) == 255
    rows, cols = white.all(axis=1), white.all(axis=0)
    for period in range(padding + 2, h):
        if (h - padding) % period or (w - padding) % period or ((h - padding) // period) % 2:
            continue
        if _bands(rows, period, padding) and _bands(cols, period, padding):
            return period
    return None


def labelled_pairs(data: bytes, padding: int = PADDING) -> tuple[bytes, int] | None:
    """``(PNG, victims)``: the grid ``data`` re-laid as one row per victim, truth left and
    reconstruction right (module docstring); ``None`` when its layout is not found."""
    from PIL import Image

    try:
        with Image.open(BytesIO(data)) as im:
            pixels = np.asarray(im.convert("RGB"))
    except Exception:  # not an image PIL reads: shown as it is
        return None
    period = tile_period(pixels, padding)
    if period is None:
        return None
    h, w = pixels.shape[:2]
    pairs = (h - padding) // period // 2
    gap = np.full((period, GAP, 3), 255, dtype=np.uint8)
    rows = [
        np.concatenate(
            [
                pixels[2 * i * period : (2 * i + 1) * period],
                gap,
                pixels[(2 * i + 1) * period : (2 * i + 2) * period],
            ],
            axis=1,
        )
        for i in range(pairs)
    ]
    bottom = np.full((padding, 2 * w + GAP, 3), 255, dtype=np.uint8)
    out = BytesIO()
    Image.fromarray(np.concatenate([*rows, bottom], axis=0)).save(out, format="PNG", optimize=True)
    return out.getvalue(), pairs
