"""Streamed pipelines for clouds larger than memory: preprocessing and patch grouping of one huge PLY.

A capability layer over the out-of-core engine of :mod:`pcgeom.ops.streamed` (tiles with halos, answers
equal to the in-memory calls bit for bit) and the chunked PLY I/O of :mod:`pcgeom.io`. The CLI's
``pcgeom preprocess`` and ``pcgeom group`` switch to these when a file is larger than their memory budget.

* :mod:`pcgeom.streaming.preprocess`: voxel subsampling, statistical and radius outlier removal and
  normals, written in chunks; the same points kept and the same normals as the in-memory command.
* :mod:`pcgeom.streaming.group`: FPS centres and their KNN patches of one huge cloud, streamed to disk in
  ``pcgeom group``'s format.
"""

# The budget estimates (in_memory_bytes, streamed_bytes) differ per pipeline: import them from
# pcgeom.streaming.preprocess / pcgeom.streaming.group.
from pcgeom.streaming.group import GroupedFile, group_streamed
from pcgeom.streaming.preprocess import (
    PreprocessPlan,
    StreamedPreprocessResult,
    plan_preprocess,
    preprocess_streamed,
)

__all__ = ["GroupedFile", "PreprocessPlan", "StreamedPreprocessResult", "group_streamed", "plan_preprocess",
           "preprocess_streamed"]
