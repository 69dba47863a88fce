// High-dimensional exact KNN on the CPU (feature vectors): blocked GEMM
// candidate selection with exact re-ranking.  See knn_blocked_cpu.cpp.
#pragma once

#include <cstdint>

#include "knn/knn_dispatch_cpu.h"

namespace pcgeom {

// Exact KNN (optionally within dist2 <= radius2) for any D; meant for D > 8.
// Same contract and bit-identical results as knn_search_cpu.  Points per cloud
// must be < 2^31.  `forced`: the override (knn_path_override), which the
// per-cloud plan reads.  Instantiated for T = float and double (half
// precision is converted to float32 by the caller).
template <typename T>
void knn_blocked_cpu(const T* q, const T* p, const int64_t* ql, const int64_t* pl, int64_t B,
                     int64_t M, int64_t N, int64_t D, int64_t K, bool use_radius, double radius2,
                     bool self_query, KnnPath forced, T* out_d, int64_t* out_i);

}  // namespace pcgeom
