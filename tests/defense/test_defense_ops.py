"""``bench.defense.rowwise``: the row-wise operators shared by defenses."""

import pytest
import torch

from bench.defense.rowwise import clip_rows, column_blocks, norm_scale, top_k_count, top_k_rows


@pytest.mark.parametrize(
    ("width", "rows", "elements"), [(10, 3, 9), (10, 3, 1), (7, 100, 1 << 20), (1, 1, 1)]
)
def test_column_blocks_cover_every_column_once(width, rows, elements):
    blocks = column_blocks(width, rows, elements)
    covered = [c for b in blocks for c in range(width)[b]]
    assert covered == list(range(width))
    assert all(len(range(width)[b]) * rows <= max(elements, rows) for b in blocks)


def test_clipping_never_divides_zero_by_zero():
    x = torch.zeros(3, 4, dtype=torch.float64)
    assert torch.equal(clip_rows(x, 1.0), x)
    assert torch.equal(norm_scale(torch.zeros(2, 1), torch.zeros(2, 1)), torch.ones(2, 1))


def test_a_radius_per_row():
    x = torch.tensor([[3.0, 4.0], [3.0, 4.0]], dtype=torch.float64)
    out = clip_rows(x, torch.tensor([[1.0], [10.0]], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8], [3.0, 4.0]], dtype=torch.float64))


def test_top_k_counts_and_works_on_any_leading_shape():
    assert top_k_count(10, 3, None) == 3 and top_k_count(10, 30, None) == 10
    assert top_k_count(10, None, 0.01) == 1 and top_k_count(10, None, 0.3) == 3
    x = torch.tensor([[[1.0, -5.0, 2.0], [0.5, 0.1, -0.2]]])
    assert torch.equal(top_k_rows(x, 1), torch.tensor([[[0.0, -5.0, 0.0], [0.5, 0.0, 0.0]]]))
