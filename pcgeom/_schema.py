"""The op schemas of the ``pcgeom`` torch library.

These strings are the contract shared by every path: ``csrc/ops.cpp`` registers
the same ones through the stable ABI, and when the native library is absent
``pcgeom._backend`` defines them here so that ``torch.ops.pcgeom.*``, the fake
kernels and ``torch.compile`` behave identically.  ``tests/test_backend.py``
checks that the two agree.
"""

SCHEMAS = {
    "knn": "knn(Tensor query, Tensor points, int k, Tensor query_lengths, Tensor points_lengths) -> (Tensor, Tensor)",
    "knn_backward": "knn_backward(Tensor grad_dist2, Tensor query, Tensor points, Tensor idx) -> (Tensor, Tensor)",
    "ball_query": "ball_query(Tensor query, Tensor points, float radius, int k, Tensor query_lengths, Tensor points_lengths, bool index_order=False) -> (Tensor, Tensor)",
    "knn_gather": "knn_gather(Tensor x, Tensor idx) -> Tensor",
    "knn_gather_backward": "knn_gather_backward(Tensor grad, Tensor idx, int n) -> Tensor",
    "farthest_point_sample": "farthest_point_sample(Tensor points, int n_samples, Tensor lengths, Tensor start_index) -> Tensor",
    "pca_normals": "pca_normals(Tensor points, Tensor idx) -> (Tensor, Tensor)",
}
