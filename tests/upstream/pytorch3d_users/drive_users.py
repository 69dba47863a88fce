"""Runs the pytorch3d point-op calls of SC-GS, GaussianObject and SuGaR through pcgeom's shims.

Run by ``test_pytorch3d_users.py`` in a fresh interpreter: ``pcgeom.compat.enable_shims()``, then
``import pytorch3d.ops`` as these repositories do.  SC-GS's lines are its own, vendored unchanged in
``sc_gs/time_utils_excerpt.py`` (MIT).  GaussianObject's and SuGaR's files are under Inria's non-commercial
licence (see README.md), so their calls are written here in our own code, with their arguments.  Every
input and output is saved to ``argv[1]``; the test compares them with a float64 brute force.
"""

import os
import sys
import types

import torch

import pcgeom.compat

pcgeom.compat.enable_shims()
import pytorch3d.ops  # noqa: E402  (served by the shim from here on)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "sc_gs"))
import time_utils_excerpt as scgs  # noqa: E402

g = torch.Generator().manual_seed(0)


def lattice(*shape):
    # coordinates k/64: every squared distance is exact in float32, so the float32 KNN and the float64
    # brute force see the same numbers and the lattice's ties (duplicate points included) must go the same way
    return torch.randint(0, 64, shape, generator=g).float() / 64


out = {"served_by": pytorch3d.ops.knn_points.__module__}

# SC-GS ControlNodeWarp.cal_nn_weight with its defaults (node_num=512, K=3, hyper_dim=2, with_node_weight=True)
nodes = torch.cat([lattice(512, 3), lattice(512, 2)], dim=1)  # xyz + hyper coordinates
warp = types.SimpleNamespace(skinning=False, cached_nn_weight=False, nn_weight=None, hyper_dim=2, K=3,
                             nodes=nodes, node_radius=0.05 + torch.rand(512, generator=g),
                             with_node_weight=True, node_weight=torch.rand(512, 1, generator=g))
x, feature = lattice(4000, 3), lattice(4000, 2)
out["scgs"] = dict(x=x, feature=feature, nodes=nodes, node_radius=warp.node_radius, node_weight=warp.node_weight)
out["scgs"]["xyz"] = scgs.cal_nn_weight(warp, x)                          # 3-D: x against the node xyz
out["scgs"]["hyper"] = scgs.cal_nn_weight(warp, x, feature=feature)       # 5-D: with the hyper coordinates
out["scgs"]["softmax"] = scgs.cal_nn_weight(warp, x, gs_kernel=False, temperature=0.1)
traj = lattice(512, 12)  # p2dR: 4 time samples x 3 coordinates per node, K=8
out["scgs"]["traj"] = traj
out["scgs"]["p2dR_traj"] = scgs.p2dR_trajectory_knn(traj, 8)
out["scgs"]["p2dR_node"] = scgs.p2dR_node_knn(nodes[:, :3], 8)

# GaussianObject GaussianModel's outlier pruning: self-KNN of the Gaussians with K = int(sqrt(N)), dists only
xyz = lattice(3000, 3)
dists = pytorch3d.ops.knn_points(xyz.unsqueeze(0), xyz.unsqueeze(0), K=int(xyz.shape[0] ** 0.5)).dists
out["gaussianobject"] = dict(xyz=xyz, dists=dists)

# SuGaR SuGaR model: scale initialisation (K=4, sqrt of the 3 non-first distances), tracked neighbours
# (knn_to_track=16), edge-centre neighbours (K=8), the Gaussians closest to samples (K=16) and normals
# estimated from the Gaussians' centres (neighborhood_size=32, disambiguated)
pts, samples = lattice(5000, 3), lattice(700, 3)
su = dict(points=pts, samples=samples)
su["init"] = torch.sqrt(pytorch3d.ops.knn_points(pts[None], pts[None], K=4).dists[..., 1:])
track = pytorch3d.ops.knn_points(pts[None], pts[None], K=16)
su["track"] = (track.dists[0], track.idx[0])
su["edges"] = pytorch3d.ops.knn_points(samples[None], samples[None], K=8).idx[0]
su["closest"] = pytorch3d.ops.knn_points(samples[None], pts[None], K=16).idx[0]
# normals on a noisy sphere, in float64 so that they can be compared with the brute force tightly
sphere = torch.nn.functional.normalize(torch.randn(3000, 3, generator=g, dtype=torch.float64), dim=1)
sphere = sphere * (1 + 0.01 * torch.rand(3000, 1, generator=g, dtype=torch.float64))
su["sphere"] = sphere
su["normals"] = pytorch3d.ops.estimate_pointcloud_normals(sphere[None], neighborhood_size=32,
                                                         disambiguate_directions=True)[0]
out["sugar"] = su

torch.save(out, sys.argv[1])
print("OK pytorch3d users")
