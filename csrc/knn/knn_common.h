// Math shared by the knn / ball_query kernels on every device.
//
// Contract (see pcgeom.knn): for each query, the k smallest (dist2, index) keys
// among the valid points, ascending; NaN distances rank after +inf; ties go to
// the lower index.  Slots with no point are idx=-1, dist2=+inf.
#pragma once

#include "common/pcgeom_common.h"

namespace pcgeom {

// A sorted list of the best `k` keys seen so far, kept in caller-owned arrays.
// Insertion is O(k) per accepted candidate, which is what a per-query top-k with
// small k wants; callers with very large k use a heap on the CPU instead.
template <typename A>
struct SortedTopK {
  A* dist;
  int64_t* idx;
  int64_t k;
  int64_t count;

  PCGEOM_HD SortedTopK(A* d, int64_t* i, int64_t k_) : dist(d), idx(i), k(k_), count(0) {}

  // Worst key currently kept, or "accept everything" while not full.
  PCGEOM_HD bool accepts(A d, int64_t i) const {
    return count < k || key_less(d, i, dist[k - 1], idx[k - 1]);
  }

  PCGEOM_HD void push(A d, int64_t i) {
    if (!accepts(d, i)) return;
    int64_t pos = count < k ? count++ : k - 1;
    while (pos > 0 && key_less(d, i, dist[pos - 1], idx[pos - 1])) {
      dist[pos] = dist[pos - 1];
      idx[pos] = idx[pos - 1];
      --pos;
    }
    dist[pos] = d;
    idx[pos] = i;
  }
};

}  // namespace pcgeom
