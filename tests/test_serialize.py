"""pcgeom.serialize against Point Transformer V3's own serialization code (vendored, unchanged)."""

from __future__ import annotations

import pytest
import torch

import pcgeom
from upstream.pointcept_serialization import encode as ptv3_encode

ORDERS = ["z", "z-trans", "hilbert", "hilbert-trans"]


def ptv3_serialization(coord, offset, grid_size, orders, depth=None):
    """Point.serialization of Pointcept (structure.py), transcribed: the grid
    coordinates, adaptive depth, batch bits, argsort and inverse."""
    batch = torch.arange(len(offset)).repeat_interleave(torch.diff(offset, prepend=offset.new_zeros(1)))
    grid_coord = torch.div(coord - coord.min(0)[0], grid_size, rounding_mode="trunc").int()
    if depth is None:
        depth = int(grid_coord.max() + 1).bit_length()
    code = torch.stack([ptv3_encode(grid_coord, batch, depth, order=o) for o in orders])
    return code, depth


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("depth", [1, 3, 9, 16])
def test_codes_equal_ptv3_encode(order, depth):
    g = torch.Generator().manual_seed(depth)
    grid = torch.randint(0, 2**depth, (500, 3), generator=g)
    offsets = torch.tensor([0, 1, 200, 200, 500])
    batch = torch.arange(5).repeat_interleave(torch.diff(offsets, prepend=torch.zeros(1, dtype=torch.int64)))
    s = pcgeom.serialize(grid_coord=grid, offsets=offsets, order=order, depth=depth)
    want = ptv3_encode(grid, batch, depth, order=order)
    assert torch.equal(s.code, want)
    assert s.depth == depth
    assert torch.equal(s.order, torch.sort(want, stable=True).indices)
    assert torch.equal(s.order[s.inverse], torch.arange(500))
    assert (torch.diff(s.code[s.order]) >= 0).all()


def test_points_path_equals_ptv3_serialization():
    g = torch.Generator().manual_seed(0)
    coord = torch.rand(3000, 3, generator=g) * torch.tensor([6.0, 4.0, 2.5]) - 1.0
    offsets = torch.tensor([1000, 1001, 3000])
    want, depth = ptv3_serialization(coord, offsets, 0.02, ORDERS)
    s = pcgeom.serialize(coord, 0.02, offsets=offsets, order=ORDERS)
    assert s.depth == depth == 9
    assert torch.equal(s.code, want)
    assert s.order.shape == (4, 3000)
    for k in range(4):
        assert torch.equal(s.code[k][s.order[k]], torch.sort(want[k]).values)
        assert torch.equal(s.inverse[k][s.order[k]], torch.arange(3000))


def test_hilbert_visits_neighbouring_cells():
    # Independent property: on a full 8^3 grid consecutive Hilbert codes are face neighbours.
    ax = torch.arange(8)
    grid = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, 3)
    for order in ("hilbert", "hilbert-trans"):
        s = pcgeom.serialize(grid_coord=grid, order=order, depth=3)
        assert torch.equal(torch.sort(s.code).values, torch.arange(512))
        walk = grid[s.order]
        assert ((walk[1:] - walk[:-1]).abs().sum(1) == 1).all()
    z = pcgeom.serialize(grid_coord=grid, order="z", depth=3)
    x, y, zc = grid.unbind(1)
    bit = lambda v, i: (v >> i) & 1  # noqa: E731
    want = sum((bit(x, i) << (3 * i + 2)) | (bit(y, i) << (3 * i + 1)) | (bit(zc, i) << (3 * i)) for i in range(3))
    assert torch.equal(z.code, want)


def test_equal_codes_keep_input_order():
    grid = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    s = pcgeom.serialize(grid_coord=grid, order="hilbert")
    assert s.order.tolist() == [1, 3, 0, 2]


def test_serialize_errors():
    g = torch.tensor([[0, 1, 2], [3, 4, 5]])
    with pytest.raises(ValueError, match="order must be one of"):
        pcgeom.serialize(grid_coord=g, order="peano")
    with pytest.raises(ValueError, match="grid_coord must be >= 0"):
        pcgeom.serialize(grid_coord=-g)
    with pytest.raises(ValueError, match=r"grid_coord must be < 2\*\*depth = 4, got max 5"):
        pcgeom.serialize(grid_coord=g, depth=2)
    with pytest.raises(ValueError, match="depth must be an int in"):
        pcgeom.serialize(grid_coord=g, depth=22)
    with pytest.raises(ValueError, match=r"3 \* depth \+ bit_length\(B\) must be <= 63"):
        pcgeom.serialize(grid_coord=g, depth=21, offsets=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="give points and voxel_size, or grid_coord"):
        pcgeom.serialize(torch.rand(4, 3))
    with pytest.raises(ValueError, match="integer"):
        pcgeom.serialize(grid_coord=g.float())
