// The tree path of the CPU KNN (D <= 8): a KD-tree per cloud, queries grouped
// by the leaf they start from.  See knn_lowd_cpu.cpp.
#pragma once

#include "knn/knn_problem_cpu.h"

namespace pcgeom {

// Exact KNN (optionally within dist2 <= radius2) for pr.D = 1 .. 8 (plan()
// answers tree only there; any other D goes to the tile path whole).  Per
// cloud the plan (pr.forced included) picks the tree or the tile path.  Same
// contract and bit-identical results as knn_search_cpu; padding rows included.
// Instantiated for A = float and double.
template <typename A>
void knn_lowd_cpu(const KnnProblem<A>& pr);

}  // namespace pcgeom
