// The index-order ball query row, shared by the CPU and CUDA kernels.
//
// PointNet++'s selection: scan the valid points in index order and keep the
// first k with dist2 <= r2 (NaN distances never qualify); each kept slot gets
// its own distance, the rest idx=-1, dist2=+inf (pcgeom's padding).
#pragma once

#include <cstdint>

#include "common/pcgeom_common.h"

namespace pcgeom {

template <typename T, typename A>
PCGEOM_HD void ball_query_index_row(const T* qr, const T* pb, int64_t L, int64_t D, int64_t K,
                                    A r2, T* od, int64_t* oi) {
  int64_t found = 0;
  for (int64_t j = 0; j < L && found < K; ++j) {
    const A d = sq_dist<T, A>(qr, pb + j * D, D);
    if (d <= r2) {
      od[found] = static_cast<T>(d);
      oi[found] = j;
      ++found;
    }
  }
  for (int64_t s = found; s < K; ++s) {
    od[s] = static_cast<T>(pos_inf<A>());
    oi[s] = -1;
  }
}

}  // namespace pcgeom
