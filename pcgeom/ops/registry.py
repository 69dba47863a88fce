"""The op registry: the one place that says which ops the ``pcgeom`` torch library has.

Each :class:`OpEntry` names an op's schema, its pure-torch reference (fallback and
test oracle), the Python file that holds its public wrapper, fake kernel and
autograd registration, the folder of its C++/CUDA kernels and its test file.
Everything else is derived from this table:

* the C++ ``m.def`` block of ``csrc/ops.cpp`` is generated from it at build time
  (``csrc/build_config.py``, called by ``setup.py`` and the ASan and CUDA-emulator
  build scripts);
* :mod:`pcgeom.ops` defines the schemas from it when the native library is
  absent, registers the references under them and imports each op's file;
* the tests read it (``tests/test_raw_ops.py``, ``tests/test_backend.py``,
  ``tests/test_cuda.py``) and CI's CUDA job runs the test files it names.

Later per-op facts belong here too, as new :class:`OpEntry` fields with a
default (an ONNX export translation, a benchmark workload), so that adding an op
stays: its kernel folder in ``csrc/``, its file in ``pcgeom/ops/``, one entry
below, its tests (marked ``pytestmark = pytest.mark.ops``).

This module imports nothing but the standard library: ``setup.py`` loads it by
file path, before torch or pcgeom can be imported.
"""

from __future__ import annotations

from typing import NamedTuple

NAMESPACE = "pcgeom"


class OpEntry(NamedTuple):
    """One op of the ``pcgeom`` torch library.

    Attributes:
        name: the op's name, the same at every level (``torch.ops.pcgeom.<name>``,
            ``<name>_cpu`` / ``<name>_cuda`` kernels).
        schema: the torch schema string, without the namespace.
        reference: ``"module:function"`` of the pure-torch implementation that serves
            every device without a native kernel and is the semantic spec.
        module: the Python file (module name) with the public wrapper, the fake
            kernel and the autograd registration; imported when :mod:`pcgeom.ops` loads.
        kernels: the folder under ``csrc/`` holding ``<kernels>_cpu.cpp`` and
            ``<kernels>_cuda.cu`` (a backward op lives with its forward).
        tests: the test file, relative to the repository root.
        onnx: ``"module:function"`` of the ONNX export translation, or None where the
            op has none (an export then fails naming the op).
    """

    name: str
    schema: str
    reference: str
    module: str
    kernels: str
    tests: str
    onnx: str | None = None

    @property
    def cpu_source(self) -> str:
        return f"csrc/{self.kernels}/{self.kernels}_cpu.cpp"

    @property
    def cuda_source(self) -> str:
        return f"csrc/{self.kernels}/{self.kernels}_cuda.cu"


_REF = "pcgeom.ops.reference"
_ONNX = "pcgeom.onnx.translations"

OPS: tuple[OpEntry, ...] = (
    OpEntry("knn",
            "knn(Tensor query, Tensor points, int k, Tensor query_lengths, Tensor points_lengths) -> (Tensor, Tensor)",
            f"{_REF}:knn_reference", "pcgeom.ops.knn", "knn", "tests/test_knn.py",
            onnx=f"{_ONNX}:knn_translation"),
    OpEntry("knn_backward",
            "knn_backward(Tensor grad_dist2, Tensor query, Tensor points, Tensor idx) -> (Tensor, Tensor)",
            f"{_REF}:knn_backward_reference", "pcgeom.ops.knn", "knn", "tests/test_knn.py"),
    OpEntry("ball_query",
            "ball_query(Tensor query, Tensor points, float radius, int k, Tensor query_lengths, "
            "Tensor points_lengths, bool index_order=False) -> (Tensor, Tensor)",
            f"{_REF}:ball_query_reference", "pcgeom.ops.ball_query", "ball_query", "tests/test_ball_query.py",
            onnx=f"{_ONNX}:ball_query_translation"),
    OpEntry("knn_gather", "knn_gather(Tensor x, Tensor idx) -> Tensor",
            f"{_REF}:knn_gather_reference", "pcgeom.ops.knn_gather", "knn_gather", "tests/test_knn_gather.py",
            onnx=f"{_ONNX}:knn_gather_translation"),
    OpEntry("knn_gather_backward", "knn_gather_backward(Tensor grad, Tensor idx, int n) -> Tensor",
            f"{_REF}:knn_gather_backward_reference", "pcgeom.ops.knn_gather", "knn_gather", "tests/test_knn_gather.py"),
    OpEntry("farthest_point_sample",
            "farthest_point_sample(Tensor points, int n_samples, Tensor lengths, Tensor start_index) -> Tensor",
            f"{_REF}:farthest_point_sample_reference", "pcgeom.ops.farthest_point_sample", "farthest_point_sample",
            "tests/test_farthest_point_sample.py",
            onnx=f"{_ONNX}:farthest_point_sample_translation"),
    OpEntry("pca_normals", "pca_normals(Tensor points, Tensor idx) -> (Tensor, Tensor)",
            f"{_REF}:pca_normals_reference", "pcgeom.ops.pca_normals", "pca_normals", "tests/test_normals.py",
            onnx=f"{_ONNX}:pca_normals_translation"),
)

#: ONNX translations of the Python custom ops (``torch.library.custom_op``) that pcgeom defines outside
#: the ``pcgeom`` library and that a model's forward can reach: ``"namespace::name" -> "module:function"``.
#: pointnet2's FPS with its CUDA kernel's tie order, which the pointnet2_ops / Point-MAE / PointWeb stand-ins
#: run while being traced; ``pcgeom_grouping::pointgpt_order``'s translation refuses it by name (its greedy
#: chain over ``torch.cdist`` distances has no exact ONNX form).
PYTHON_OP_ONNX: dict[str, str] = {
    "pcgeom_grouping::pointnet2_fps": f"{_ONNX}:pointnet2_fps_translation",
    "pcgeom_grouping::pointgpt_order": f"{_ONNX}:pointgpt_order_translation",
    # pcgeom._export_guard: a check eager pcgeom makes in Python, kept in the exported graph (a run-time error).
    "pcgeom_export::require": f"{_ONNX}:require_translation",
}

BY_NAME: dict[str, OpEntry] = {e.name: e for e in OPS}
SCHEMAS: dict[str, str] = {e.name: e.schema for e in OPS}


def cpp_schema_definitions(library: str = "m") -> str:
    """The ``m.def(...)`` lines of every op, as C++ source (for the generated header)."""
    return "\n".join(f'{library}.def("{e.schema}");' for e in OPS)
