"""The pytorch3d point-op calls of SC-GS, GaussianObject and SuGaR through pcgeom's shims (see README.md).

``drive_users.py`` makes the calls in a fresh interpreter with ``pcgeom.compat.enable_shims()`` on; here
each output is compared with a float64 brute force: the full distance matrix, sorted stably (ties to the
lower index), and for the normals a float64 ``eigh`` of each point's 32-neighbourhood covariance with
upstream's sign rule.  The inputs lie on a lattice of step 1/64, where float32 distances are exact, so KNN
indices and distances must be equal, ties included.
"""

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow  # upstream call sites end to end, in a subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def brute_knn(p1, p2, K):
    d = (p1.double()[:, None, :] - p2.double()[None, :, :]).square().sum(-1)
    dists, idx = torch.sort(d, dim=1, stable=True)
    return dists[:, :K], idx[:, :K]


def brute_normals(points, K):
    _, idx = brute_knn(points, points, K)
    nb = points[idx]                                          # (N, K, 3)
    centred = nb - nb.mean(1, keepdim=True)
    cov = centred.transpose(1, 2) @ centred / K               # biased mean, neighbourhood includes the point
    normal = torch.linalg.eigh(cov).eigenvectors[:, :, 0]
    # upstream's sign rule: flip unless at least half of the neighbours lie on the normal's positive side
    n_pos = (((nb - points[:, None]) * normal[:, None]).sum(-1) > 0).sum(1)
    return torch.where((n_pos < 0.5 * K)[:, None], -normal, normal)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import importlib.machinery
    if importlib.machinery.PathFinder.find_spec("pytorch3d") is not None:
        pytest.skip("a real pytorch3d is installed (it wins over the shim)")
    path = tmp_path_factory.mktemp("p3d-users") / "out.pt"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "drive_users.py"), str(path)], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"drive_users.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "OK pytorch3d users" in proc.stdout
    out = torch.load(path)
    assert out["served_by"].startswith("pcgeom.compat.pytorch3d."), out["served_by"]
    return out


def assert_knn(dists, idx, ref):
    torch.testing.assert_close(dists.double(), ref[0], rtol=0, atol=0)
    assert torch.equal(idx, ref[1])


def test_sc_gs_control_node_weights(run):
    r = run["scgs"]
    x, feature, nodes = r["x"], r["feature"], r["nodes"]
    for case, q, n in (("xyz", x, nodes[:, :3]), ("hyper", torch.cat([x, feature], 1), nodes)):
        weight, dist, idx = r[case]
        ref = brute_knn(q, n, 3)
        assert_knn(dist, idx, ref)
        # SC-GS's Gaussian kernel on the brute-force neighbours, in float64
        w = torch.exp(-ref[0] / (2 * r["node_radius"].double()[ref[1]] ** 2)) * r["node_weight"].double()[ref[1], 0]
        w = (w + 1e-7) / (w + 1e-7).sum(-1, keepdim=True)
        torch.testing.assert_close(weight.double(), w, rtol=1e-5, atol=1e-7)  # float32 exp / sum
    weight, dist, idx = r["softmax"]
    ref = brute_knn(x, nodes[:, :3], 3)
    assert_knn(dist, idx, ref)
    torch.testing.assert_close(weight.double(), torch.softmax(-ref[0] / 0.1, -1), rtol=1e-5, atol=1e-7)


def test_sc_gs_p2dR_neighbours(run):
    r = run["scgs"]
    dist, idx = r["p2dR_traj"]                                # 12-D trajectories, self excluded by slicing
    ref = brute_knn(r["traj"], r["traj"], 9)
    assert_knn(dist, idx, (ref[0][:, 1:], ref[1][:, 1:]))
    dist, idx, nn = r["p2dR_node"]
    xyz = r["nodes"][:, :3]
    ref = brute_knn(xyz, xyz, 9)
    assert_knn(dist, idx, (ref[0][:, 1:], ref[1][:, 1:]))
    assert torch.equal(nn, xyz[ref[1][:, 1:]])


def test_gaussianobject_pruning_distances(run):
    r = run["gaussianobject"]
    ref = brute_knn(r["xyz"], r["xyz"], int(r["xyz"].shape[0] ** 0.5))[0]
    torch.testing.assert_close(r["dists"][0].double(), ref, rtol=0, atol=0)


def test_sugar_neighbours_and_normals(run):
    r = run["sugar"]
    pts, samples = r["points"], r["samples"]
    ref4 = brute_knn(pts, pts, 4)[0]
    torch.testing.assert_close(r["init"][0].double(), ref4[:, 1:].sqrt(), rtol=1e-7, atol=0)  # float32 sqrt
    assert_knn(*r["track"], brute_knn(pts, pts, 16))
    assert torch.equal(r["edges"], brute_knn(samples, samples, 8)[1])
    assert torch.equal(r["closest"], brute_knn(samples, pts, 16)[1])
    torch.testing.assert_close(r["normals"], brute_normals(r["sphere"], 32), rtol=0, atol=1e-9)
