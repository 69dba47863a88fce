"""Streamed pipelines for clouds larger than memory: preprocessing and patch grouping of one huge PLY.

A capability layer over the out-of-core engine of :mod:`pcgeom.ops.streamed` (tiles with halos, answers
equal to the in-memory calls bit for bit) and the chunked PLY I/O of :mod:`pcgeom.io`. The CLI's
``pcgeom preprocess`` and ``pcgeom group`` switch to these when a file is larger than their memory budget.

* :mod:`pcgeom.streaming.preprocess`: voxel subsampling, statistical and radius outlier removal and
  normals, written in chunks; the same points kept and the same normals as the in-memory command.
* :mod:`pcgeom.streaming.group`: FPS centres and their KNN patches of one huge cloud, streamed to disk in
  ``pcgeom group``'s format.
"""

from pcgeom.streaming.preprocess import (
    PreprocessPlan,
    StreamedPreprocessResult,
    in_memory_bytes,
    plan_preprocess,
    preprocess_streamed,
    streamed_bytes,
)
