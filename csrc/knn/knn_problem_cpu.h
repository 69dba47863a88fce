// One CPU KNN search as every path receives it (knn_cpu.cpp, knn_tile_cpu.cpp,
// knn_blocked_cpu.cpp), and the padding rows written once for all of them.
#pragma once

#include <cstdint>

#include "knn/knn_dispatch_cpu.h"
#include "knn/knn_rows_cpu.h"

namespace pcgeom {

// A padded batch on float32 or float64 arrays (half precision was converted by
// knn_search_cpu).  Every array is contiguous; the lengths were range-checked.
template <typename A>
struct KnnProblem {
  const A* q;          // queries (B, M, D)
  const A* p;          // points (B, N, D)
  const int64_t* ql;   // query_lengths (B,), each in [0, M]
  const int64_t* pl;   // points_lengths (B,), each in [0, N]
  int64_t B, M, N, D;  // the padded sizes
  int64_t K;           // neighbours per query (slots per output row)
  bool use_radius;     // keep only dist2 <= radius2
  double radius2;      // each path rounds it to A once, as the reference does
  bool self_query;     // q and p are the same tensor
  KnnPath forced;      // knn_path_override(): the per-cloud plan reads it
  A* out_d;            // dist2 (B, M, K)
  int64_t* out_i;      // idx (B, M, K)

  A r2() const { return static_cast<A>(radius2); }
};

// The padding rows of cloud b: the K slots of every row past its query length
// -- and of every row when the cloud has no point -- get dist2 = +inf, idx = -1
// (pcgeom.knn's contract).  Searched rows pad their own slots past the
// neighbours found (cpu::write_row).
template <typename A>
inline void write_padding_rows(const KnnProblem<A>& pr, int64_t b) {
  const int64_t from = pr.pl[b] > 0 ? pr.ql[b] : 0;
  for (int64_t m = from; m < pr.M; ++m) {
    cpu::write_padding<A, A>(pr.K, pr.out_d + (b * pr.M + m) * pr.K,
                             pr.out_i + (b * pr.M + m) * pr.K);
  }
}

// The padding rows of every cloud.
template <typename A>
inline void write_padding_rows(const KnnProblem<A>& pr) {
  for (int64_t b = 0; b < pr.B; ++b) write_padding_rows(pr, b);
}

}  // namespace pcgeom
