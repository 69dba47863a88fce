"""Fuzz: second-order gradients (issue #39, D1) of every differentiable public function.

Each example draws a function of ``tests/test_second_order.py``'s table, the sizes (``k > N`` padding,
one-point clouds, ragged lengths, D = 1..3) and a seed, and runs ``gradcheck`` and ``gradgradcheck`` on
the float64 inputs in full (not fast) mode, warnings as errors: a second order dropped with torch's
UserWarning, a wrong Hessian-vector product or a refusal all fail.
"""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")
from hypothesis import strategies as st  # noqa: E402

from tests.fuzz.strategies import fuzz  # noqa: E402
from tests.test_second_order import CASES, check_second_order  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(CASES))
@fuzz(weight=0.01, B=st.integers(1, 2), N=st.integers(1, 6), M=st.integers(1, 4), k=st.integers(1, 5),
      D=st.integers(1, 3), C=st.integers(1, 2), seed=st.integers(0, 2**31))
def test_second_order_gradients(name, B, N, M, k, D, C, seed):
    if name.startswith("compat_pointnet2") or name in ("compat_chamfer_ext", "metrics_add_s", "pca_normals",
                                                       "estimate_normals", "compat_pointops"):
        D = 3  # xyz functions
    check_second_order(name, seed, dict(B=B, N=N, M=M, k=k, D=D, C=C), fast_mode=False)
