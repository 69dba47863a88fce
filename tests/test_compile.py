"""torch.compile(fullgraph=True) captures every op, forward and backward,
on the native and on the pure-torch path (the suite runs under both)."""

import pytest
import torch

import pcgeom
from conftest import random_cloud

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path


def _pipeline(points):
    centers_idx = pcgeom.farthest_point_sample(points, 8)
    centers = pcgeom.knn_gather(points, centers_idx[:, :, None])[:, :, 0]
    dist2, idx = pcgeom.knn(centers, points, 5)
    groups = pcgeom.knn_gather(points, idx) - centers[:, :, None]
    ball = pcgeom.ball_query(centers, points, 0.3, 4)
    return dist2.sum() + groups.square().sum() + torch.nan_to_num(ball.dist2, posinf=0.0).sum()


def test_compile_fullgraph_forward_and_backward(device):
    torch._dynamo.reset()
    p = random_cloud(2, 64, dtype=torch.float32, device=device, seed=1)
    p1 = p.clone().requires_grad_()
    p2 = p.clone().requires_grad_()
    eager = _pipeline(p1)
    eager.backward()
    compiled = torch.compile(_pipeline, fullgraph=True, backend="aot_eager")(p2)
    compiled.backward()
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(p2.grad, p1.grad)


@pytest.mark.slow
def test_compile_inductor_with_lengths(device):
    torch._dynamo.reset()

    def f(q, p, lengths):
        d, i = pcgeom.knn(q, p, 3, points_lengths=lengths)
        return (torch.where(i >= 0, d, 0) * 2).sum(-1), i

    q = random_cloud(2, 10, device=device, seed=2)
    p = random_cloud(2, 30, device=device, seed=3)
    lengths = torch.tensor([30, 12], device=device)
    a = f(q, p, lengths)
    b = torch.compile(f, fullgraph=True)(q, p, lengths)
    torch.testing.assert_close(a[0], b[0])
    assert torch.equal(a[1], b[1])
