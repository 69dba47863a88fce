"""ONNX translations of the ``pcgeom`` torch ops, in standard opset-18 ops only.

Each function here is handed to ``torch.onnx.export(..., dynamo=True,
custom_translation_table=...)`` for one op of the ``pcgeom`` torch library;
the exporter calls it once while tracing, with ``SymbolicTensor`` inputs (their
dtype and static dims known) and the op's non-tensor arguments as Python
values.  Each op's entry in the op registry (:mod:`pcgeom.ops.registry`,
field ``onnx``) names its function here, and :func:`pcgeom.onnx.translation_table`
reads them from there; :data:`TRANSLATIONS` is the same mapping by op name.

The rules that make pcgeom's answers exact are kept, op by op:

* squared distances are ``sum_d (q_d - p_d)**2``, one coordinate after the
  other (D is static at export, so the sum is spelled out coordinate by
  coordinate), in the accumulation dtype: float32 for float16/bfloat16/float32
  inputs, float64 for float64 -- the same roundings as the kernels, so the
  distances are bit-equal;
* order: finite distances ascending, then ``+inf``, then NaN, ties to the lower
  index -- ONNX's TopK fixes "equal values: lower index first": a TopK over
  the finite distances, and only where some row has fewer than k finite valid
  neighbours (an ``If``) a second TopK over a class code orders the rest;
  neither relies on how a runtime sorts NaN;
* ``idx = -1`` / ``dist2 = +inf`` padding, ``k > N`` allowed, ragged lengths,
  0-based int64 indices;
* FPS is a ``Loop`` that carries the running minimum, with the reference's rule
  for chosen points, NaN and ties (first maximum of ``ArgMax``).

Memory: the searches are brute force, a ``(B, M, N)`` distance tensor plus
two sort keys and a few masks of the same shape -- about 20 bytes per
query-point pair in float32 (about 28 in float64).  Point-MAE's grouping
(``32 * 64 * 1024`` = 2e6 pairs) needs ~40 MB; at 5e7 pairs (1 GB) it stops
being sensible: chunk the queries, or keep the search in PyTorch, whose
kernels never allocate ``M x N``.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir
import onnxscript.evaluator
from onnxscript import opset18 as op

from pcgeom._pointnet2_kernel import MAX_THREADS, NEAR_ORIGIN, TEMP_INIT
from pcgeom.onnx import ExportError

OPSET = 18

_LOOP_IDS = itertools.count()


def _loop_prefix(what: str) -> str:
    """A name prefix unique to one exported Loop.

    The values of a Loop body are named explicitly; two loops in one model
    (PointNet++ samples at every level) would otherwise define the same names
    and the file would fail ``onnx.checker`` (names must be unique across
    nested graphs).
    """
    return f"{what}{next(_LOOP_IDS)}"


def _name_body(t, prefix: str) -> None:
    for i, node in enumerate(t.nodes):
        node.name = f"{prefix}_node{i}"
        for j, out in enumerate(node.outputs):
            out.name = f"{prefix}_v{i}_{j}"

_FLOAT = ir.DataType.FLOAT
_DOUBLE = ir.DataType.DOUBLE
_INT64 = ir.DataType.INT64
_BOOL = ir.DataType.BOOL
_NP = {_FLOAT: np.float32, _DOUBLE: np.float64}


def _acc(x) -> ir.DataType:
    """Accumulation dtype of the distance math for an input (see pcgeom.ops.reference.acc_dtype)."""
    return _DOUBLE if x.dtype == _DOUBLE else _FLOAT


def _const(value, dtype) -> "ir.Value":
    return op.Constant(value=ir.tensor(np.asarray(value, dtype=dtype)))


def _static_dim(fn: str, name: str, x, dim: int, layout: str) -> int:
    size = x.shape[dim] if x.shape is not None else None
    if not isinstance(size, int):
        raise ExportError(
            f"pcgeom.onnx: {fn}: the size of {name} in dimension {dim} {layout} must be static at export "
            f"(the distance sum is spelled out coordinate by coordinate), got {size!r}; "
            f"do not mark that dimension dynamic"
        )
    return size


def _dim(x, axis: int):
    """Runtime size of one axis as a 1-element int64 tensor."""
    return op.Shape(x, start=axis, end=axis + 1)


def _arange(n1):
    """``arange(n)`` for a 1-element int64 tensor ``n1``."""
    return op.Range(_const(0, np.int64), op.Squeeze(n1, [0]), _const(1, np.int64))


def _sq_dist(q, p, d: int, acc):
    """``(B, M, N)`` squared distances, summed coordinate after coordinate like the kernels."""
    out = None
    for c in range(d):
        ci = _const(c, np.int64)
        diff = op.Sub(op.Unsqueeze(op.Gather(q, ci, axis=2), [2]), op.Unsqueeze(op.Gather(p, ci, axis=2), [1]))
        sq = op.Mul(diff, diff)
        out = sq if out is None else op.Add(out, sq)
    return out


def _if_else(cond, then_fn, else_fn, what: str, dtype=_INT64):
    """An ONNX ``If`` whose branches are built on tapes by ``then_fn(tape)`` / ``else_fn(tape)`` (one output each, of ``dtype``).

    Like the FPS Loop, built directly in ONNX IR: the branches read outer values.
    """
    pre = _loop_prefix(what)
    branches = []
    for side, fn in (("then", then_fn), ("else", else_fn)):
        t = ir.tape.Tape()
        out = fn(t)
        out.dtype = dtype
        _name_body(t, f"{pre}_{side}")
        branches.append(ir.Graph([], [out], nodes=t.nodes, name=f"{pre}_{side}", opset_imports={"": OPSET}))
    node = ir.Node("", "If", [cond], attributes=[ir.AttrGraph("then_branch", branches[0]),
                                                 ir.AttrGraph("else_branch", branches[1])], num_outputs=1)
    onnxscript.evaluator.default().nodes.append(node)
    node.outputs[0].dtype = dtype
    return node.outputs[0]


def _class_order(t, fin, valid, isnan, isinf, kt, i1):
    """TopK 2 and the merge, on a tape: class code 0 finite, 1 +inf, 2 NaN, 3 invalid, then index order.

    Slot j takes TopK 1 while finite neighbours last, then TopK 2 at the same
    slot: TopK 2's first n_finite slots are exactly the finite ones.
    """
    def c(value, dtype):
        return t.op("Constant", [], attributes={"value": ir.tensor(np.asarray(value, dtype=dtype))})

    f = np.float32
    code = t.op("Where", [valid, t.op("Where", [isnan, c(2.0, f), t.op("Where", [isinf, c(1.0, f), c(0.0, f)])]),
                          c(3.0, f)])
    _, i2 = t.op_multi_out("TopK", [code, kt], attributes={"axis": 2, "largest": 0, "sorted": 1}, num_outputs=2)
    n_fin = t.op("ReduceSum", [t.op("Cast", [fin], attributes={"to": _INT64}), c([2], np.int64)],
                 attributes={"keepdims": 1})  # (B, M, 1)
    j = t.op("Range", [c(0, np.int64), t.op("Squeeze", [kt, c([0], np.int64)]), c(1, np.int64)])
    return t.op("Where", [t.op("Less", [j, n_fin]), i1, i2])


def _search(fn, query, points, k: int, query_lengths, points_lengths, radius2=None, index_order=False):
    """The shared KNN / ball-query body: ``(dist2 (B, M, k), idx (B, M, k) int64)``."""
    d = _static_dim(fn, "query", query, 2, "(B, M, D)")
    acc = _acc(query)
    npacc = _NP[acc]
    inf = _const(np.inf, npacc)
    d2 = _sq_dist(op.Cast(query, to=acc), op.Cast(points, to=acc), d, acc)  # (B, M, N)
    pvalid = op.Less(op.Unsqueeze(_arange(_dim(points, 1)), [0]), op.Unsqueeze(points_lengths, [1]))  # (B, N)
    qvalid = op.Less(op.Unsqueeze(_arange(_dim(query, 1)), [0]), op.Unsqueeze(query_lengths, [1]))  # (B, M)
    valid = op.And(op.Unsqueeze(pvalid, [1]), op.Unsqueeze(qvalid, [2]))  # (B, M, N)
    if radius2 is not None:
        # radius**2 formed in double, rounded once to the accumulation dtype (the kernels' rule)
        valid = op.And(valid, op.LessOrEqual(d2, _const(radius2, npacc)))
    # TopK takes min(k, N) columns (k > N is allowed); the k - min(k, N) missing slots are padding, added
    # to the (B, M, min(k, N)) results below -- padding the (B, M, N) distances instead would copy them.
    kt = op.Min(_const([k], np.int64), _dim(d2, 2))  # (1,)
    if index_order:
        # The first k valid points in index order: TopK over a 0/1 code, ties to the lower index.
        code = op.Where(valid, _const(0.0, np.float32), _const(1.0, np.float32))
        _, sel = op.TopK(code, kt, axis=2, largest=0, sorted=1)
    else:
        isnan = op.IsNaN(d2)
        isinf = op.IsInf(d2)
        fin = op.And(op.Not(op.Or(isnan, isinf)), valid)
        # TopK 1: the finite valid distances, ascending, ties to the lower index.
        v1, i1 = op.TopK(op.Where(fin, d2, inf), kt, axis=2, largest=0, sorted=1)
        # Every row with >= min(k, N) finite valid neighbours (the usual case: all of TopK 1's values finite,
        # as only non-finite or invalid entries hold +inf): TopK 1 is the answer.  Else TopK 2 over a class
        # code orders the rest; an If runs it only then, as it costs as much as TopK 1.
        enough = op.Less(op.ReduceMax(v1, keepdims=0), inf)
        sel = _if_else(enough, lambda t: t.op("Identity", [i1]),
                       lambda t: _class_order(t, fin, valid, isnan, isinf, kt, i1), "knn_order")
    ok = op.GatherElements(valid, sel, axis=2)
    dist = op.Where(ok, op.GatherElements(d2, sel, axis=2), inf)
    idx = op.Where(ok, sel, _const(-1, np.int64))
    pad_shape = op.Concat(op.Shape(d2, start=0, end=2), op.Sub(_const([k], np.int64), kt), axis=0)
    dist = op.Concat(dist, op.ConstantOfShape(pad_shape, value=ir.tensor(np.array([np.inf], dtype=npacc))), axis=2)
    idx = op.Concat(idx, op.ConstantOfShape(pad_shape, value=ir.tensor(np.array([-1], dtype=np.int64))), axis=2)
    return op.Cast(dist, to=query.dtype), idx


def knn_translation(query, points, k: int, query_lengths, points_lengths):
    """``pcgeom::knn`` -> brute-force distances + two TopKs.

    Same contract as :func:`pcgeom.knn` (padded layout): ``query (B, M, D)``,
    ``points (B, N, D)`` (D static), int64 lengths ``(B,)``; returns
    ``dist2 (B, M, k)`` in the input dtype, ``idx (B, M, k)`` int64.
    Costs O(B*M*N) memory (see the module docstring for the limit).
    """
    return _search("knn", query, points, k, query_lengths, points_lengths)


def ball_query_translation(query, points, radius: float, k: int, query_lengths, points_lengths,
                           index_order: bool = False):
    """``pcgeom::ball_query`` in both orders (distance: two TopKs; index: one TopK over a validity code).

    Same contract as :func:`pcgeom.ball_query`; ``dist2 <= radius**2`` with
    ``radius**2`` formed in double and rounded once to the accumulation dtype.
    Costs O(B*M*N) memory.
    """
    acc = np.float64 if query.dtype == _DOUBLE else np.float32
    r2 = acc(float(radius) * float(radius))
    return _search("ball_query", query, points, k, query_lengths, points_lengths, radius2=r2,
                   index_order=bool(index_order))


def knn_gather_translation(x, idx):
    """``pcgeom::knn_gather``: ``GatherND(batch_dims=1)``, zeros where ``idx == -1`` (a copy: exact).

    With ``N = 0`` points every index is ``-1`` and there is no row to read
    (``GatherND`` refuses index 0 of an empty axis): an ``If`` returns the
    zeros instead; the usual case pays one comparison.
    """
    out_shape = op.Concat(op.Shape(idx), _dim(x, 2), axis=0)  # (B, M, k, C)
    zero = op.CastLike(_const(0.0, np.float32), x)

    def gathered(t):
        def c(value, dtype):
            return t.op("Constant", [], attributes={"value": ir.tensor(np.asarray(value, dtype=dtype))})

        safe = t.op("Max", [idx, c(0, np.int64)])
        out = t.op("GatherND", [x, t.op("Unsqueeze", [safe, c([3], np.int64)])], attributes={"batch_dims": 1})
        keep = t.op("Unsqueeze", [t.op("GreaterOrEqual", [idx, c(0, np.int64)]), c([3], np.int64)])
        return t.op("Where", [keep, out, zero])

    def zeros(t):
        return t.op("Expand", [zero, out_shape])

    has_points = op.Greater(op.Squeeze(_dim(x, 1), [0]), _const(0, np.int64))
    return _if_else(has_points, gathered, zeros, "knn_gather", dtype=x.dtype)


def farthest_point_sample_translation(points, n_samples: int, lengths, start_index):
    """``pcgeom::farthest_point_sample`` as an ONNX ``Loop`` carrying the running minimum.

    Exactly :func:`pcgeom.ops.reference.farthest_point_sample_reference`:
    sample 0 is ``start_index[b]`` (0 for empty clouds); each step marks the
    last sample as chosen (``-inf``), lowers the running minimum with the new
    distances (a NaN distance sticks), maps NaN to -1 so that non-finite points
    come last, and takes the first maximum (``ArgMax(select_last_index=0)``:
    ties to the lowest index).  ``min(n_samples, N)`` iterations; slots
    ``s >= lengths[b]`` are ``-1``.  Memory O(B*N); time O(n_samples*B*N).
    """
    fn = "farthest_point_sample"
    d = _static_dim(fn, "points", points, 2, "(B, N, D)")
    acc = _acc(points)
    npacc = _NP[acc]
    p = op.Cast(points, to=acc)
    planes = [op.Gather(p, _const(c, np.int64), axis=2) for c in range(d)]  # D x (B, N)
    n1 = _dim(points, 1)
    ar_n = op.Unsqueeze(_arange(n1), [0])  # (1, N)
    in_len = op.Less(ar_n, op.Unsqueeze(lengths, [1]))  # (B, N)
    neg_inf = _const(-np.inf, npacc)
    mind0 = op.Where(in_len, _const(np.inf, npacc), neg_inf)
    zero = _const(0, np.int64)
    cur0 = op.Where(op.Greater(lengths, zero), start_index, zero)
    cur0 = op.Max(op.Min(cur0, op.Sub(op.Squeeze(n1, [0]), _const(1, np.int64))), zero)
    trips = op.Squeeze(op.Min(_const([n_samples], np.int64), n1), [0])

    # The loop body, built directly in ONNX IR: the trace-time op recorder has
    # no notion of subgraphs.  It reads ``planes`` and ``ar_n`` from the outer graph.
    t = ir.tape.Tape()

    def c(value, dtype):
        return t.op("Constant", [], attributes={"value": ir.tensor(np.asarray(value, dtype=dtype))})

    pre = _loop_prefix("fps")
    it = ir.Value(name=f"{pre}_iter", type=ir.TensorType(_INT64), shape=ir.Shape([]))
    cond = ir.Value(name=f"{pre}_cond", type=ir.TensorType(_BOOL), shape=ir.Shape([]))
    mind = ir.Value(name=f"{pre}_mind", type=ir.TensorType(acc))
    cur = ir.Value(name=f"{pre}_cur", type=ir.TensorType(_INT64))
    cur2 = t.op("Unsqueeze", [cur, c([1], np.int64)])  # (B, 1)
    rec = t.op("Identity", [cur])
    mind_a = t.op("Where", [t.op("Equal", [ar_n, cur2]), c(-np.inf, npacc), mind])
    dist = None
    for plane in planes:
        diff = t.op("Sub", [plane, t.op("GatherElements", [plane, cur2], attributes={"axis": 1})])
        sq = t.op("Mul", [diff, diff])
        dist = sq if dist is None else t.op("Add", [dist, sq])
    isnan = t.op("IsNaN", [dist])
    upd = t.op("And", [t.op("Or", [isnan, t.op("Less", [dist, mind_a])]),
                       t.op("Not", [t.op("Equal", [mind_a, c(-np.inf, npacc)])])])
    mind_b = t.op("Where", [upd, dist, mind_a])
    key = t.op("Where", [t.op("IsNaN", [mind_b]), c(-1.0, npacc), mind_b])
    cur_b = t.op("ArgMax", [key], attributes={"axis": 1, "keepdims": 0, "select_last_index": 0})
    cond_out = t.op("Identity", [cond])
    _name_body(t, pre)
    body = ir.Graph([it, cond, mind, cur], [cond_out, mind_b, cur_b, rec], nodes=t.nodes, name=f"{pre}_step",
                    opset_imports={"": OPSET})

    true = _const(True, np.bool_)
    node = ir.Node("", "Loop", [trips, true, mind0, cur0], attributes=[ir.AttrGraph("body", body)], num_outputs=3)
    onnxscript.evaluator.default().nodes.append(node)
    recs = node.outputs[2]  # (T, B)
    recs.dtype = _INT64
    b1 = _dim(points, 0)
    # A Loop that runs 0 times (N = 0) gives a scan output of unspecified rank (onnxruntime: (0,)): make it (T, B).
    recs = op.Reshape(recs, op.Concat(op.Unsqueeze(trips, [0]), b1, axis=0), allowzero=1)
    chosen = op.Transpose(recs, perm=[1, 0])  # (B, T)
    fill_shape = op.Concat(b1, op.Sub(_const([n_samples], np.int64), op.Min(_const([n_samples], np.int64), n1)), axis=0)
    out = op.Concat(chosen, op.ConstantOfShape(fill_shape, value=ir.tensor(np.array([-1], dtype=np.int64))), axis=1)
    ar_s = op.Unsqueeze(op.Range(zero, _const(n_samples, np.int64), _const(1, np.int64)), [0])  # (1, S)
    return op.Where(op.Less(ar_s, op.Unsqueeze(lengths, [1])), out, _const(-1, np.int64))


def _pointnet2_priority(n1):
    """``pcgeom._pointnet2_kernel.priority(N)`` in the graph, for a runtime ``N`` (a 1-element int64 tensor).

    ``bs`` = the largest power of two ``<= min(N, MAX_THREADS)``, chosen from
    the ten candidates by comparison (no floating log2, which can round below
    an exact power); ``key = bitrev(k mod bs) * ceil(N / bs) + k div bs`` in
    int64 arithmetic (bit ``b`` of ``t`` is ``(t div 2**b) mod 2``, its
    mirrored weight ``bs div 2**(b+1)``); the permutation is the ascending
    order of the (distinct) keys: a TopK over all N of them.
    """
    i64 = np.int64
    cands = _const([1 << j for j in range(MAX_THREADS.bit_length())], i64)
    one = _const(1, i64)
    bs = op.ReduceMax(op.Where(op.LessOrEqual(cands, n1), cands, one), keepdims=1)  # (1,)
    k = _arange(n1)  # (N,)
    t = op.Mod(k, bs)
    rev = None
    for b in range(MAX_THREADS.bit_length() - 1):
        bit = op.Mod(op.Div(t, _const(1 << b, i64)), _const(2, i64))
        term = op.Mul(bit, op.Div(bs, _const(1 << (b + 1), i64)))
        rev = term if rev is None else op.Add(rev, term)
    rounds = op.Div(op.Sub(op.Add(n1, bs), one), bs)
    key = op.Add(op.Mul(rev, rounds), op.Div(k, bs))
    # keys < N + bs: exact in double; TopK over doubles is supported by every runtime
    _, perm = op.TopK(op.Cast(key, to=_DOUBLE), n1, axis=0, largest=0, sorted=1)
    return perm


def pointnet2_fps_translation(points, n_samples: int):
    """``pcgeom_grouping::pointnet2_fps`` (the pointnet2_ops stand-in's FPS, PointNet++ / Point-MAE) as a ``Loop``.

    Exactly :func:`pcgeom._pointnet2_kernel.fps`, the pure-torch transcription
    of pointnet2's CUDA kernel: the points in the kernel's tie priority order
    (:func:`_pointnet2_priority`, computed in the graph for the runtime N),
    float32 coordinates, points with ``|p|^2 <= NEAR_ORIGIN`` starting at -1
    (never chosen while an eligible point is left), the others at ``TEMP_INIT``;
    each step ``d = dx*dx + dy*dy + dz*dz`` rounded after every operation,
    ``temp = fmin(d, temp)`` (a NaN distance keeps ``temp``), then the first
    maximum (``ArgMax(select_last_index=0)``).  Input ``(B, N, 3)``, output
    ``(B, n_samples)`` int64 (the op's dtype; the stand-in casts to int32).
    Memory O(B*N); time O(n_samples*B*N).
    """
    fn = "pointnet2_fps"
    d = _static_dim(fn, "points", points, 2, "(B, N, 3)")
    i64 = np.int64
    n1 = _dim(points, 1)
    perm = _pointnet2_priority(n1)
    p = op.Gather(op.Cast(points, to=_FLOAT), perm, axis=1)  # (B, N, 3) in priority order
    planes = [op.Gather(p, _const(c, i64), axis=2) for c in range(d)]  # D x (B, N)
    mag = None
    for plane in planes:
        sq = op.Mul(plane, plane)
        mag = sq if mag is None else op.Add(mag, sq)
    eligible = op.Greater(mag, _const(NEAR_ORIGIN, np.float32))
    temp0 = op.Where(eligible, _const(TEMP_INIT, np.float32), _const(-1.0, np.float32))
    pos0 = op.ConstantOfShape(op.Concat(_dim(points, 0), _const([1], i64), axis=0),
                              value=ir.tensor(np.array([0], dtype=i64)))  # (B, 1): original index 0
    if n_samples <= 1:
        return op.Gather(perm, pos0, axis=0)

    pre = _loop_prefix("pointnet2_fps")
    t = ir.tape.Tape()
    it = ir.Value(name=f"{pre}_iter", type=ir.TensorType(_INT64), shape=ir.Shape([]))
    cond = ir.Value(name=f"{pre}_cond", type=ir.TensorType(_BOOL), shape=ir.Shape([]))
    temp = ir.Value(name=f"{pre}_temp", type=ir.TensorType(_FLOAT))
    pos = ir.Value(name=f"{pre}_pos", type=ir.TensorType(_INT64))
    dist = None
    for plane in planes:
        diff = t.op("Sub", [plane, t.op("GatherElements", [plane, pos], attributes={"axis": 1})])
        sq = t.op("Mul", [diff, diff])
        dist = sq if dist is None else t.op("Add", [dist, sq])
    # fmin(d, temp) with temp never NaN: d where d < temp (False for a NaN d), else temp
    temp_b = t.op("Where", [t.op("Less", [dist, temp]), dist, temp])
    pos_b = t.op("ArgMax", [temp_b], attributes={"axis": 1, "keepdims": 1, "select_last_index": 0})
    rec = t.op("Identity", [pos_b])
    cond_out = t.op("Identity", [cond])
    _name_body(t, pre)
    body = ir.Graph([it, cond, temp, pos], [cond_out, temp_b, pos_b, rec], nodes=t.nodes, name=f"{pre}_step",
                    opset_imports={"": OPSET})
    trips = _const(n_samples - 1, i64)
    node = ir.Node("", "Loop", [trips, _const(True, np.bool_), temp0, pos0], attributes=[ir.AttrGraph("body", body)],
                   num_outputs=3)
    onnxscript.evaluator.default().nodes.append(node)
    recs = node.outputs[2]  # (n_samples - 1, B, 1)
    recs.dtype = _INT64
    steps = op.Transpose(op.Squeeze(recs, [2]), perm=[1, 0])  # (B, n_samples - 1)
    positions = op.Concat(pos0, steps, axis=1)  # (B, n_samples)
    return op.Gather(perm, positions, axis=0)


def pca_normals_translation(points, idx):
    """``pcgeom::pca_normals`` is not exported: raises :class:`ExportError`.

    The kernels solve each 3x3 eigenproblem with cyclic Jacobi rotations
    (``csrc/pca_normals/pca_normals_common.h``: a bounded number of sweeps,
    branches per rotation) after sequential sums over the k neighbours.  An
    ONNX copy would unroll every sweep and every sum into a few thousand
    nodes, and equality with the kernels would still depend on the kernels'
    compiler not contracting ``a*b + c`` into fused multiply-adds (nvcc does
    by default); the pure-torch path itself agrees with the kernels only to
    rounding.  Rather than export normals that are merely close, the export
    stops here with a message saying what to do instead.
    """
    raise ExportError(
        "pcgeom.onnx: pca_normals (pcgeom.ops.pca_normals / pcgeom.estimate_normals) cannot be exported: "
        "its Jacobi eigen-solver has no exact standard-ONNX form; compute normals before export "
        "(e.g. in preprocessing) and feed them to the model as an input"
    )


def pointgpt_order_translation(centers):
    """``pcgeom_grouping::pointgpt_order`` is not exported: raises :class:`ExportError`.

    PointGPT's chain ranks centres by ``torch.cdist``, whose distances come
    from a matrix product for larger inputs (``|a|^2 + |b|^2 - 2ab``, rounded
    differently from the summed squared differences ONNX would compute), and
    every step depends on the previous choice: a close-but-different distance
    would reorder the whole chain.  The export stops rather than write a file
    whose patch order can differ from PyTorch's.
    """
    raise ExportError(
        "pcgeom.onnx: pointgpt_order (pcgeom.grouping.pointgpt_order, PointGPT's patch order) cannot be exported: "
        "its greedy chain over torch.cdist distances has no exact standard-ONNX form; compute the order outside "
        "the exported module (after grouping) and pass it in, or export the part of the model after the ordering"
    )


def searchsorted_translation(sorted_sequence, self, *, out_int32: bool = False, right: bool = False,
                             side=None, sorter=None):
    """``aten::searchsorted`` (torchlib has none): the packed layout maps offsets to clouds with it.

    A comparison count, exact for sorted inputs: ``right`` counts
    ``sequence <= value``, else ``sequence < value``; O(len(values) *
    len(sequence)) memory, fine for offsets (one entry per cloud).
    """
    if sorter is not None:
        raise ExportError("pcgeom.onnx: searchsorted: the sorter argument is not supported; sort the sequence first")
    if side is not None:
        right = side == "right"
    cmp = op.LessOrEqual if right else op.Less
    seq = op.Unsqueeze(sorted_sequence, [-2])  # (..., 1, L)
    val = op.Unsqueeze(self, [-1])  # (..., n, 1)
    count = op.ReduceSum(op.Cast(cmp(seq, val), to=_INT64), [-1], keepdims=0)
    return op.Cast(count, to=ir.DataType.INT32) if out_int32 else count


def pyg_knn_translation(x, y, ptr_x=None, ptr_y=None, k: int = 1, cosine: bool = False, num_workers: int = 1):
    """``pyg::knn`` as pcgeom's pyg_lib stand-in serves it (PyG 2.8's ``DynamicEdgeConv``, ``knn_graph``, ...), one cloud.

    For ``ptr_x = ptr_y = None`` (one cloud, what PyG passes for ``batch=None``)
    the stand-in returns, for each row of ``y`` in order, its ``min(k, N)``
    nearest rows of ``x`` (nearest first, ties to the lower index; no slot is
    ever ``-1`` in one cloud: NaN points are ranked last, not dropped), as
    ``edge_index (2, M * min(k, N))`` ``[y row, x row]`` -- the torch_cluster
    stand-in's one-cloud search, with the same KNN translation (:func:`knn_translation`).
    ``y`` is cast to ``x``'s dtype first, as the stand-in does.  Several clouds
    (``ptr_x`` / ``ptr_y``) and ``cosine=True`` raise :class:`ExportError`.
    """
    if ptr_x is not None or ptr_y is not None:
        raise ExportError(
            "pcgeom.onnx: pyg_lib's knn (torch.ops.pyg.knn, pcgeom's stand-in; PyG 2.8's DynamicEdgeConv, knn_graph, "
            "knn_interpolate ...) with ptr_x / ptr_y (a batch of clouds) cannot be exported: the edge count depends "
            "on the clouds' sizes, read from tensor values; export the model for one cloud per call (batch=None), "
            "or search packed clouds with pcgeom.knn(y, x, k, query_offsets=..., points_offsets=...), which exports"
        )
    if cosine:
        raise ExportError(
            "pcgeom.onnx: pyg_lib's knn (torch.ops.pyg.knn) with cosine=True cannot be exported exactly (the row "
            "norms' summation order is not ONNX's); normalise the rows in the model and search with cosine=False"
        )
    fn = "pyg.knn"
    d = _static_dim(fn, "x", x, 1, "(N, F)")
    y = op.CastLike(y, x)
    q, p = op.Unsqueeze(y, [0]), op.Unsqueeze(x, [0])
    for v in (q, p):  # _search reads the coordinate count and dtype from its inputs
        v.dtype = x.dtype
        v.shape = ir.Shape([1, None, d])
    m1, n1 = _dim(y, 0), _dim(x, 0)
    _, idx = _search(fn, q, p, k, m1, n1)  # (1, M, k), -1 only in the slots >= N
    kt = op.Min(_const([k], np.int64), n1)
    idx = op.Slice(op.Squeeze(idx, [0]), _const([0], np.int64), kt, _const([1], np.int64))  # (M, min(k, N))
    row = op.Expand(op.Unsqueeze(_arange(m1), [1]), op.Shape(idx))
    flat = _const([1, -1], np.int64)
    return op.Concat(op.Reshape(row, flat), op.Reshape(idx, flat), axis=0)


def _pyg_refusal(name: str, why: str, instead: str):
    raise ExportError(f"pcgeom.onnx: pyg_lib's {name} (torch.ops.pyg.{name}, pcgeom's stand-in) cannot be "
                      f"exported: {why}; {instead}")


def pyg_radius_translation(x, y, ptr_x=None, ptr_y=None, r: float = 1.0, max_num_neighbors: int = 32,
                           num_workers: int = 1, ignore_same_index: bool = False):
    """``pyg::radius`` is not exported: raises :class:`ExportError` (a data-dependent edge count)."""
    _pyg_refusal("radius", "the number of edges (points within r, capped at max_num_neighbors) depends on the data",
                 "search with pcgeom.ball_query(y[None], x[None], r, max_num_neighbors, order='index') (a fixed-size "
                 "result padded with -1), which exports")


def pyg_fps_translation(src, ptr, ratio: float = 0.5, random_start: bool = True):
    """``pyg::fps`` is not exported: raises :class:`ExportError` (sample counts computed from ``ptr``'s values)."""
    _pyg_refusal("fps", "the number of samples, ceil(ratio * N) per cloud, is computed from ptr's values",
                 "sample a fixed count with pcgeom.farthest_point_sample(x[None], n_samples), which exports")


def pyg_nearest_translation(x, y, ptr_x=None, ptr_y=None):
    """``pyg::nearest`` is not exported: raises :class:`ExportError` (cloud sizes checked from ``ptr``'s values)."""
    _pyg_refusal("nearest", "the stand-in checks the clouds' sizes from ptr's values",
                 "use pcgeom.knn(x[None], y[None], 1).idx[0, :, 0] for one cloud, which exports")


#: pyg-lib's operators as pcgeom's pyg_lib stand-in serves them -> translation (a one-cloud search, or a named
#: refusal); :func:`pcgeom.onnx.translation_table` adds the ones this process got from the stand-in.
PYG_LIB_TRANSLATIONS = {
    "knn": pyg_knn_translation,
    "radius": pyg_radius_translation,
    "fps": pyg_fps_translation,
    "nearest": pyg_nearest_translation,
}


#: ``metadata_props`` key of a run-time check's node; :func:`pcgeom.onnx.export` names the node after its value.
CHECK_KEY = "pcgeom.check"


def require_translation(x, ok, message: str):
    """``pcgeom_export::require`` (a size or value check eager pcgeom makes): ``x`` if ``ok`` holds, else a run-time error.

    Standard ONNX has no ``Assert``; a ``Reshape`` whose target shape every
    runtime must validate plays its part: ``Reshape(x, Shape(x))`` (a no-op)
    when no element of ``ok`` is False, ``Reshape(x, [-2, -2, ...])`` (invalid
    at every rank >= 1: no dimension may be below ``-1``; ``[-1]`` would
    be a valid reshape of a 1-D ``x`` such as packed offsets) otherwise.
    onnxruntime then fails with "Non-zero status code returned while running
    Reshape node. Name:'<message>' ..."; :func:`pcgeom.onnx.export` names the
    node (``metadata_props`` ``CHECK_KEY``).  An empty ``ok`` holds (no
    element is False).
    """
    bad_count = op.ReduceSum(op.Reshape(op.Cast(op.Not(ok), to=_INT64), _const([-1], np.int64)),
                             _const([0], np.int64), keepdims=0)
    holds = op.Equal(bad_count, _const(0, np.int64))
    shape = op.Shape(x)
    invalid = op.Expand(_const([-2], np.int64), op.Shape(shape))
    out = op.Reshape(x, op.Where(holds, shape, invalid))
    out.producer().metadata_props[CHECK_KEY] = message
    return out


#: aten ops that pcgeom's Python code calls and torchlib does not translate.
ATEN_TRANSLATIONS = {
    "searchsorted.Tensor": searchsorted_translation,
}

#: op name -> translation; the op registry names these as each op's export translation.
TRANSLATIONS = {
    "knn": knn_translation,
    "ball_query": ball_query_translation,
    "knn_gather": knn_gather_translation,
    "farthest_point_sample": farthest_point_sample_translation,
    "pca_normals": pca_normals_translation,
}

#: Python custom ops (``torch.library.custom_op``, outside the ``pcgeom`` library) -> translation;
#: the op registry's PYTHON_OP_ONNX names these.
PYTHON_OP_TRANSLATIONS = {
    "pcgeom_grouping::pointnet2_fps": pointnet2_fps_translation,
    "pcgeom_grouping::pointgpt_order": pointgpt_order_translation,
    "pcgeom_export::require": require_translation,
}
