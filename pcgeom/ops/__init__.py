"""pcgeom's ops: each is a real torch op (``torch.ops.pcgeom.<name>``) with a
public wrapper, a fake kernel and an autograd registration.

Loading this package registers every op of the registry (:mod:`pcgeom.ops.registry`):
:mod:`pcgeom._backend` has loaded the native library (schemas + kernels) if it was
built; an op it did not define gets its schema here, every op gets its pure-torch
reference (:mod:`pcgeom.ops.reference`) for the devices without a native kernel,
and each op's own file is imported for its fake kernel and autograd.
"""

import importlib

import torch

import pcgeom._backend  # noqa: F401  (loads the native library before the schemas are looked up)
from pcgeom.ops.registry import NAMESPACE, OPS

_libraries = []  # keep the torch.library.Library objects alive


def _register() -> None:
    missing = [e for e in OPS if not hasattr(getattr(torch.ops, NAMESPACE), e.name)]
    if missing:  # no native library (or an old one): define the schemas in Python
        lib = torch.library.Library(NAMESPACE, "FRAGMENT")
        for e in missing:
            lib.define(e.schema)
        _libraries.append(lib)
    impl = torch.library.Library(NAMESPACE, "IMPL")
    for e in OPS:
        module, function = e.reference.split(":")
        # CompositeExplicitAutograd covers every backend without a kernel of its own
        # (CUDA on a CPU-only build, MPS, XPU, ...); native CPU/CUDA kernels win where present.
        impl.impl(e.name, getattr(importlib.import_module(module), function), "CompositeExplicitAutograd")
    _libraries.append(impl)
    for module in dict.fromkeys(e.module for e in OPS):  # fake kernels and autograd
        importlib.import_module(module)


_register()

from pcgeom.ops.knn import KNNResult, knn  # noqa: E402
from pcgeom.ops.ball_query import ball_query  # noqa: E402
from pcgeom.ops.knn_gather import knn_gather  # noqa: E402
from pcgeom.ops.farthest_point_sample import farthest_point_sample  # noqa: E402
from pcgeom.ops.packed import pack, unpack  # noqa: E402
from pcgeom.ops.pca_normals import PCANormalsResult, pca_normals  # noqa: E402
from pcgeom.ops.streamed import (StreamedBlock, ball_query_blocks, ball_query_streamed,  # noqa: E402
                                 knn_blocks, knn_streamed)

__all__ = ["KNNResult", "knn", "ball_query", "knn_gather", "farthest_point_sample", "pack", "unpack", "PCANormalsResult", "pca_normals",
           "StreamedBlock", "knn_blocks", "knn_streamed", "ball_query_blocks", "ball_query_streamed"]
