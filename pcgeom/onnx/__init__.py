"""``pcgeom.onnx``: export models built on pcgeom to standard ONNX (opset 18).

One call::

    import pcgeom.onnx
    program = pcgeom.onnx.export(model, (points,), "model.onnx")

runs ``torch.onnx.export(..., dynamo=True)`` with a translation for every op
of the ``pcgeom`` torch library (:func:`translation_table`), opset
:data:`OPSET`, and the batch and point-count axes of the inputs dynamic.  The
file holds standard ONNX operators only (no custom domain), so it runs on any
runtime; onnxruntime returns the same indices and the same distances as pcgeom
in PyTorch (docs/guides/deploying-onnx.md says what is exact, what is not
exportable and the memory limits of the brute-force searches).

Needs the ``onnx`` extra: ``pip install "pcgeom[onnx]"`` (onnx, onnxscript,
onnxruntime).  They are imported on first use, not with ``pcgeom``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings

import torch

from pcgeom._export_guard import onnx_export_scope

__all__ = ["OPSET", "ExportError", "export", "optimize_preserving", "translation_table", "require"]

#: The one ONNX opset every exported file uses (default domain only).
OPSET = 18

_INSTALL_HINT = 'pcgeom.onnx needs onnx, onnxscript and onnxruntime: pip install "pcgeom[onnx]"'


def require(module: str):
    """Imports an optional dependency of pcgeom.onnx, or raises ImportError with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{_INSTALL_HINT} (could not import {module}: {exc})") from exc


def _translations():
    require("onnx")
    require("onnxscript")
    from pcgeom.onnx import translations

    return translations


class ExportError(RuntimeError):
    """An op or mode that cannot be expressed in standard ONNX; raised at export time.

    The message names the op, the argument and what to do instead.
    """


def translation_table() -> dict:
    """``{torch.ops.pcgeom.<op>.default: translation}`` for ``torch.onnx.export(custom_translation_table=...)``.

    For users who call ``torch.onnx.export(model, args, dynamo=True,
    custom_translation_table=pcgeom.onnx.translation_table(), opset_version=18)``
    themselves.  Covers every op of the ``pcgeom`` torch library that a
    forward can call (``knn``, ``ball_query``, ``knn_gather``,
    ``farthest_point_sample``, ``pca_normals`` -- the last one raises
    :class:`ExportError`: see the guide), the Python custom ops the stand-ins
    trace through (``pcgeom_grouping::pointnet2_fps``, pointnet2's FPS with its
    kernel's tie order; ``pcgeom_grouping::pointgpt_order`` raises
    :class:`ExportError`; ``registry.PYTHON_OP_ONNX``), plus ``aten.searchsorted`` (used by
    the packed layout; torch's exporter has no translation for it).
    """
    import importlib

    import pcgeom.ops  # noqa: F401  (defines torch.ops.pcgeom.*)
    import pcgeom.grouping  # noqa: F401  (defines the pcgeom_grouping Python custom ops)
    import pcgeom._export_guard  # noqa: F401  (defines torch.ops.pcgeom_export.require)
    from pcgeom.ops.registry import OPS, PYTHON_OP_ONNX

    tr = _translations()
    table = {}

    def load(where):
        module, function = where.split(":")
        return getattr(importlib.import_module(module), function)

    for e in OPS:  # each op's translation is named in the op registry
        if e.onnx is not None:
            table[getattr(torch.ops.pcgeom, e.name).default] = load(e.onnx)
    for qualname, where in PYTHON_OP_ONNX.items():  # and the Python custom ops' there too
        namespace, name = qualname.split("::")
        table[getattr(getattr(torch.ops, namespace), name).default] = load(where)
    if "pcgeom.compat.pyg_lib" in sys.modules:  # PyG 2.8's torch.ops.pyg.*, where pcgeom's stand-in defined them
        from pcgeom.compat.pyg_lib._ops import registered_ops

        for name in registered_ops():
            if name in tr.PYG_LIB_TRANSLATIONS:
                table[getattr(torch.ops.pyg, name).default] = tr.PYG_LIB_TRANSLATIONS[name]
    for name, fn in tr.ATEN_TRANSLATIONS.items():
        packet, overload = name.split(".")
        table[getattr(getattr(torch.ops.aten, packet), overload)] = fn
    return table


def _n_dynamic(x: torch.Tensor) -> int:
    return 2 if x.dim() >= 3 else min(x.dim(), 1)


def _default_dynamic_shapes(model, args, kwargs):
    """Dynamic batch and point-count axes: dims 0 and 1 of inputs of rank >= 3 (``(B, N, D)``), dim 0 otherwise.

    Rank 2 is the packed layout ``(N_total, D)`` (or ``(B, C)``), rank 1 the
    lengths / offsets ``(B,)``; the last axis (coordinates, channels) stays static.

    ``Dim.AUTO`` lets torch.export keep an axis static where the model
    requires it (a reshape to a fixed size); :func:`export` warns about those.
    """
    auto = torch.export.Dim.AUTO

    def spec(x):
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return None
        return {a: auto for a in range(_n_dynamic(x))}

    specs = [torch.utils._pytree.tree_map(spec, a) for a in args]
    fwd = model.forward if isinstance(model, torch.nn.Module) else model
    params = list(inspect.signature(fwd).parameters.values())
    star = [i for i, p in enumerate(params) if p.kind == inspect.Parameter.VAR_POSITIONAL]
    if star:  # torch.export sees ``forward(self, *xs)``'s inputs as one tuple
        specs = specs[:star[0]] + [tuple(specs[star[0]:])]
    if kwargs:
        order = [p.name for p in params if p.name in kwargs]
        specs += [torch.utils._pytree.tree_map(spec, kwargs[n]) for n in order]
    return tuple(specs)


def _static_axes_warning(program, args) -> None:
    flat = [a for a in torch.utils._pytree.tree_leaves(args) if isinstance(a, torch.Tensor)]
    for value, x in zip(program.model.graph.inputs, flat):
        shape = value.shape
        if shape is None:
            continue
        for a in range(_n_dynamic(x)):
            if isinstance(shape[a], int):
                warnings.warn(
                    f"pcgeom.onnx.export: input {value.name!r} axis {a} was exported static (size {shape[a]}): "
                    f"the model (or a size-0/1 example) fixed it; the file only accepts that size there. "
                    f"Export with sizes >= 2, or pass dynamic_shapes= yourself",
                    stacklevel=3,
                )


# pcgeom functions whose eager value checks branch on tensor values, which
# torch.export cannot trace: (file, function) -> what to tell the user.
_DATA_DEPENDENT = {
    ("graph.py", "batch_arg_offsets"): (
        "pcgeom.onnx: knn_graph / radius_graph / edge_features with batch= cannot be exported: the batch "
        "vector's values are checked in Python (sorted, >= 0), a branch on data that torch.export cannot "
        "trace; export with batch=None (one cloud per call), or pass the clouds packed and search with "
        "pcgeom.knn(x, x, k, query_offsets=offsets, points_offsets=offsets), which exports"
    ),
    ("compat/torch_cluster/_common.py", "count_clouds"): (
        "pcgeom.onnx: torch_cluster's knn / radius / knn_graph / radius_graph (and PyG layers that call them, "
        "such as DynamicEdgeConv) with batch_x / batch_y / batch vectors cannot be exported: the number of "
        "clouds is read from the batch vector's values, a branch on data that torch.export cannot trace; "
        "export the model for one cloud per call (batch=None, which exports with static edge counts), or "
        "search packed clouds with pcgeom.knn(y, x, k, query_offsets=..., points_offsets=...), which exports"
    ),
    # The stand-ins' calls whose one-cloud form is still data-dependent (edge or sample counts read from
    # tensor values, index values checked in Python).  Listed after count_clouds' entry on purpose: a
    # batched call fails there first and gets that message.
    ("compat/torch_cluster/radius.py", "radius_offsets"): (
        "pcgeom.onnx: torch_cluster's radius / radius_graph (pcgeom's stand-in) "
        "cannot be exported, for one cloud or several: the stand-in reads the cloud sizes and the edge count from "
        "tensor values, a branch on data that torch.export cannot trace; search with "
        "pcgeom.ball_query(y[None], x[None], r, max_num_neighbors, order='index') (a fixed-size result padded with "
        "-1), or pcgeom.radius_graph(x, r) for one cloud, both of which export"
    ),
    ("compat/torch_cluster/fps.py", "fps_impl"): (
        "pcgeom.onnx: torch_cluster's fps (pcgeom's stand-in) cannot be "
        "exported, for one cloud or several: the number of samples, ceil(ratio * N) per cloud, is read from "
        "tensor values, a branch on data that torch.export cannot trace; sample a fixed count with "
        "pcgeom.farthest_point_sample(x[None], n_samples) (or offsets= for packed clouds), which exports"
    ),
    ("compat/torch_cluster/nearest.py", "nearest_offsets"): (
        "pcgeom.onnx: torch_cluster's nearest (pcgeom's stand-in) cannot be "
        "exported: it checks the clouds' sizes from tensor values, a branch on data that torch.export cannot "
        "trace; use pcgeom.knn(x[None], y[None], 1).idx[0, :, 0] for one cloud (or query_offsets= / "
        "points_offsets= for packed clouds), which exports"
    ),
    ("compat/torch_scatter/_plan.py", "plan_for"): (
        "pcgeom.onnx: torch_scatter's scatter (pcgeom's stand-in, and scatter_softmax / scatter_logsumexp / "
        "scatter_std built on it) cannot be exported: the stand-in reads the output size (index.max() + 1) and "
        "checks the index range from tensor values, a branch on data that torch.export cannot trace; use torch's "
        "own src.new_zeros(size).scatter_reduce(dim, index, src, reduce, include_self=False) or index_add with a "
        "fixed size, which torch.onnx exports"
    ),
}


# Upstream code (not pcgeom's) that fails the same way, keyed by its path's tail.
_UPSTREAM_DATA_DEPENDENT = {
    ("torch_geometric/index.py", "index2ptr"): (
        "pcgeom.onnx: PyG 2.8's layers with a batch vector (DynamicEdgeConv, GravNetConv, XConv, knn_graph, "
        "radius_graph, fps ...) cannot be exported: PyG's index2ptr turns the batch vector into CSR pointers for "
        "torch.ops.pyg.* and reads the number of clouds from its values, a branch on data that torch.export cannot "
        "trace; export the model for one cloud per call (batch=None; the pyg_lib stand-in's one-cloud knn exports "
        "with static edge counts), or search packed clouds with pcgeom.knn(y, x, k, query_offsets=..., "
        "points_offsets=...), which exports"
    ),
}


def _name_checks(model) -> None:
    """Names each run-time check's node after its message, which onnxruntime prints when the check fails.

    torch.onnx names nodes after the traced call (``node_require``); the
    message says what the input violated (``group_patches: n_centers=64
    exceeds the number of points N``).
    """
    from pcgeom.onnx.translations import CHECK_KEY

    seen = {}
    for node in model.graph.all_nodes():
        message = node.metadata_props.get(CHECK_KEY)
        if message is None:
            continue
        n = seen[message] = seen.get(message, 0) + 1
        node.name = f"pcgeom check failed: {message}" + (f" (check {n})" if n > 1 else "")


def _known_trace_failure(exc: BaseException):
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        path = code.co_filename.replace("\\", "/")
        for (file, func), hint in _DATA_DEPENDENT.items():
            if code.co_name == func and path.endswith("pcgeom/" + file):
                return hint
        for (file, func), hint in _UPSTREAM_DATA_DEPENDENT.items():
            if code.co_name == func and path.endswith("/" + file):
                return hint
        tb = tb.tb_next
    return None


# Ops that constant folding may evaluate: exact in IEEE arithmetic (correctly rounded, or pure data
# movement / integer / comparison), so a folded value is bit-equal to what a runtime computes.  Others
# (reductions, MatMul/Conv/Gemm, Exp/Log/Pow/Erf/Tanh...) stay in the graph: their results depend on
# summation order or on the math library, and folding them would give the file another answer than the
# runtime gives the same graph.
_EXACT_FOLDABLE = frozenset({
    "Abs", "Add", "And", "Cast", "CastLike", "Ceil", "Concat", "Constant", "ConstantOfShape", "Div", "Equal",
    "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Greater", "GreaterOrEqual", "Identity",
    "IsInf", "IsNaN", "Less", "LessOrEqual", "Max", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Range", "Reshape",
    "Shape", "Size", "Slice", "Split", "Sqrt", "Squeeze", "Sub", "Tile", "Transpose", "Unsqueeze", "Where", "Xor",
})


def _should_fold(node):
    return None if node.op_type in _EXACT_FOLDABLE and node.domain in ("", "ai.onnx") else False


def optimize_preserving(model) -> None:
    """The optimizer passes :func:`export` runs by default: each one leaves every output bit-identical.

    In order, on an ``onnx_ir.Model`` in place: inline functions; fold
    constants, only through the ops of ``_EXACT_FOLDABLE`` (shape arithmetic,
    casts, correctly rounded elementwise ops, data movement; never a reduction,
    a matmul/convolution or a transcendental function); remove unused nodes,
    functions and opsets; lift constants to initializers; de-duplicate
    initializers; common-subexpression elimination; output and name fixes.

    Left out on purpose (``optimize="torch"`` runs them): onnxscript's rewrite
    rules and fusions -- BatchNorm folded into the Conv/Gemm weights and Pad
    into Conv (both change the rounding of every output), Min/Max into Clip,
    Relu/Clip fusions, broadcasts into MatMul, and the attention /
    normalisation fusions.

    Example:
        >>> import torch, pcgeom, pcgeom.onnx
        >>> class Neighbours(torch.nn.Module):
        ...     def forward(self, x):
        ...         return pcgeom.knn(x, x, 2).idx
        >>> program = pcgeom.onnx.export(Neighbours(), (torch.rand(2, 8, 3),), optimize=False)
        >>> before = len(list(program.model.graph))
        >>> pcgeom.onnx.optimize_preserving(program.model)
        >>> len(list(program.model.graph)) < before
        True
    """
    import onnx_ir.passes.common as common
    from onnxscript.optimizer import fold_constants_ir

    common.InlinePass()(model)
    fold_constants_ir(model, should_fold=_should_fold)
    for step in (common.RemoveUnusedNodesPass(), common.RemoveUnusedFunctionsPass(), common.RemoveUnusedOpsetsPass(),
                 common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
                 common.LiftSubgraphInitializersToMainGraphPass(), common.DeduplicateInitializersPass(),
                 common.CommonSubexpressionEliminationPass(), common.RemoveUnusedNodesPass(),
                 common.OutputFixPass(), common.NameFixPass()):
        step(model)


def export(model, args, f=None, *, kwargs=None, dynamic_shapes=None, opset_version: int = OPSET,
           optimize=True, **torch_onnx_kwargs):
    """Exports ``model(*args)`` to standard ONNX with pcgeom's ops translated.

    Args:
        model: a ``torch.nn.Module`` (or ``torch.export.ExportedProgram``).
        args: tuple of example inputs (sizes >= 2 on the dynamic axes: torch.export
            fixes axes of size 0 or 1).
        f: optional path; the file is written there (``None``: not saved).
        kwargs: optional keyword inputs of ``model``.
        dynamic_shapes: ``None`` (default): every tensor input's dim 0 (batch)
            and dim 1 (points) are dynamic (``torch.export.Dim.AUTO``), the rest
            static.  Pass your own spec (``torch.export.Dim`` objects, as for
            ``torch.onnx.export``) to choose, or ``False`` to make every axis
            static.
        opset_version: ONNX opset, :data:`OPSET` (18) by default; the
            translations use opset-18 operators.
        optimize: ``True`` (default): only optimizer passes that keep every
            output bit-identical (:func:`optimize_preserving` lists them);
            ``"torch"``: torch.onnx's own optimizer, whose rewrites also fold
            BatchNorm into convolution weights and fuse ops (smaller, and
            answers that differ from eager in the last bits); ``False``: none.
        **torch_onnx_kwargs: passed to ``torch.onnx.export`` (``input_names``,
            ``output_names``, ``optimize``, ``external_data``, ...).  A
            ``custom_translation_table`` given here is merged over pcgeom's.

    Returns:
        The ``torch.onnx.ONNXProgram`` (``.model_proto``, ``.save(path)``,
        ``program(*inputs)`` runs it in onnxruntime).

    Raises:
        ImportError: onnx / onnxscript / onnxruntime missing (with the install hint).
        ExportError: an op or mode without an exact standard-ONNX form
            (``pca_normals``, a dynamic coordinate axis, ...); the message names
            the op, the argument and what to do instead.

    Memory of the exported searches: brute force, ``O(B*M*N)`` -- about
    20 bytes per query-point pair in float32 (1 GB at 5e7 pairs); see docs/guides/deploying-onnx.md.
    """
    require("onnx")
    require("onnxscript")
    table = translation_table()
    table.update(torch_onnx_kwargs.pop("custom_translation_table", None) or {})
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    if dynamic_shapes is None:
        dynamic_shapes = _default_dynamic_shapes(model, args, kwargs)
        check_static = True
    else:
        check_static = False
        if dynamic_shapes is False:
            dynamic_shapes = None
    torch_onnx_kwargs.setdefault("verbose", False)
    if optimize not in (True, False, "torch"):
        raise ValueError(f'pcgeom.onnx.export: optimize must be True, False or "torch", got {optimize!r}')
    ours = optimize is True
    # The file is written after our passes and after the checks are named, so torch.onnx must not save it first.
    save = {k: torch_onnx_kwargs.pop(k) for k in ("external_data", "export_params", "keep_initializers_as_inputs")
            if k in torch_onnx_kwargs}
    try:
        with onnx_export_scope():
            program = torch.onnx.export(
                model, args, None, kwargs=kwargs, dynamo=True, custom_translation_table=table,
                dynamic_shapes=dynamic_shapes, opset_version=opset_version, optimize=optimize == "torch",
                **torch_onnx_kwargs,
            )
    except Exception as exc:
        cause = exc
        while cause is not None:
            if isinstance(cause, ExportError):
                raise ExportError(str(cause)) from exc
            hint = _known_trace_failure(cause)
            if hint:
                raise ExportError(hint) from exc
            cause = cause.__cause__ or cause.__context__
        raise
    if ours:
        optimize_preserving(program.model)
    _name_checks(program.model)
    if f is not None:
        program.save(f, include_initializers=save.get("export_params", True),
                     keep_initializers_as_inputs=save.get("keep_initializers_as_inputs", False),
                     external_data=save.get("external_data", True))
    if check_static and isinstance(model, torch.nn.Module):
        _static_axes_warning(program, args + tuple((kwargs or {}).values()))
    return program
