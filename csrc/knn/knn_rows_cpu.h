// Row helpers shared by the CPU KNN paths (knn_cpu.cpp, knn_lowd_cpu.cpp,
// knn_blocked_cpu.cpp, knn_tile_cpu.cpp): writing a query's answer, offering a
// candidate, the generic top-k container, and the brute path's scan of every
// point.
#pragma once

#include <cstdint>

#include "common/pcgeom_common.h"
#include "common/topk_cpu.h"

namespace pcgeom {
namespace cpu {

// Writes the k keys of one query (already sorted) and the padding after them.
template <typename T, typename A>
inline void write_row(const A* bd, const int64_t* bi, int64_t found, int64_t K, T* od,
                      int64_t* oi) {
  for (int64_t s = 0; s < found; ++s) {
    od[s] = static_cast<T>(bd[s]);
    oi[s] = bi[s];
  }
  for (int64_t s = found; s < K; ++s) {
    od[s] = static_cast<T>(pos_inf<A>());
    oi[s] = -1;
  }
}

template <typename T, typename A>
inline void write_padding(int64_t K, T* od, int64_t* oi) {
  write_row<T, A>(nullptr, nullptr, 0, K, od, oi);
}

// Offers one candidate to a top-k container, honouring the radius.
template <typename A, class TopK>
inline void offer(TopK& top, A d, int64_t i, bool use_radius, A r2) {
  if (use_radius && !(d <= r2)) return;
  // Cheap reject first; push() re-checks with the full (NaN-aware, index) order.
  if (top.full() && d > top.worst_dist()) return;
  top.push(d, i);
}

// Runs f(top) with the generic (NaN-aware) top-k container suited to K.
template <typename A, class Fn>
inline int64_t with_topk(A* bd, int64_t* bi, int64_t K, Fn&& f) {
  if (K <= kSortedListMaxK) {
    SortedTopKList<A> top(bd, bi, K);
    f(top);
    top.finish();
    return top.count;
  }
  HeapTopK<A> top(bd, bi, K);
  f(top);
  top.finish();
  return top.count;
}

// The brute path for one query: offers points [0, L) stored as T rows (any D).
// Distances use sq_dist, the shared formula.
template <typename T, typename A, class TopK>
inline void brute_rows(const T* qr, const T* pb, int64_t L, int64_t D, TopK& top, bool use_radius,
                      A r2) {
  for (int64_t j = 0; j < L; ++j) {
    offer(top, sq_dist<T, A>(qr, pb + j * D, D), j, use_radius, r2);
  }
}

}  // namespace cpu
}  // namespace pcgeom
