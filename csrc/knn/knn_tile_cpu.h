// Exact direct KNN on the CPU: vectorised distance tiles + partial selection.
// See knn_tile_cpu.cpp.
#pragma once

#include <cstdint>

#include "knn/knn_problem_cpu.h"

namespace pcgeom {

// Exact KNN (optionally within dist2 <= radius2) of query rows `rows[0, nrows)`
// (nullptr: rows 0 .. nrows-1) of one cloud: qb (rows x D), pb (L x D points).
// Row m's answer goes to od + m * K / oi + m * K, padded as in pcgeom.knn.
// Any D, any k, NaN/inf coordinates included; bit-identical to the reference.
// Single-threaded (callers run it on chunks of rows).  L < 2^31.
template <typename A>
void knn_tile_rows(const A* qb, const int32_t* rows, int64_t nrows, const A* pb, int64_t L,
                   int64_t D, int64_t K, bool use_radius, A r2, A* od, int64_t* oi);

// A whole call on the tile path (padding rows included), parallel over chunks
// of query rows.
template <typename A>
void knn_tile_cpu(const KnnProblem<A>& pr);

}  // namespace pcgeom
