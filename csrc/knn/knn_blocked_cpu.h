// High-dimensional exact KNN on the CPU (feature vectors): blocked GEMM
// candidate selection with exact re-ranking.  See knn_blocked_cpu.cpp.
#pragma once

#include <cstdint>

#include "knn/knn_problem_cpu.h"

namespace pcgeom {

// Exact KNN (optionally within dist2 <= radius2) for any D; meant for D > 8.
// Same contract and bit-identical results as knn_search_cpu.  Points per cloud
// must be < 2^31.  The per-cloud plan reads pr.forced.  Instantiated for
// A = float and double.
template <typename A>
void knn_blocked_cpu(const KnnProblem<A>& pr);

}  // namespace pcgeom
