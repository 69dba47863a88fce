"""pcgeom's ops: each is a real torch op (``torch.ops.pcgeom.<name>``) with a
public wrapper, a fake kernel and an autograd registration.  ``reference``
holds the pure-torch implementations (fallback and test oracle)."""

from pcgeom.ops.knn import KNNResult, knn
from pcgeom.ops.ball_query import ball_query
from pcgeom.ops.knn_gather import knn_gather
from pcgeom.ops.farthest_point_sample import farthest_point_sample
from pcgeom.ops.packed import pack, unpack
from pcgeom.ops.pca_normals import PCANormalsResult, pca_normals

__all__ = ["KNNResult", "knn", "ball_query", "knn_gather", "farthest_point_sample", "pack", "unpack", "PCANormalsResult", "pca_normals"]
