// The greedy-FPS rules shared by every farthest_point_sample kernel.
//
// Each point keeps `mind`, its minimum squared distance to the samples chosen
// so far (+inf at first).  A chosen point's mind becomes -inf and never changes
// again, so no index is chosen twice.  A NaN distance replaces mind (NaN is
// sticky), and NaN minds rank below every number, so points with non-finite
// coordinates are taken last.  The next sample is the lowest index with the
// largest key.
#pragma once

#include "common/pcgeom_common.h"

namespace pcgeom {

template <typename A>
PCGEOM_HD A fps_chosen() {
  return -pos_inf<A>();
}

template <typename A>
PCGEOM_HD A fps_update(A mind, A d) {
  if (mind == fps_chosen<A>()) return mind;
  return (is_nan(d) || d < mind) ? d : mind;
}

template <typename A>
PCGEOM_HD A fps_key(A mind) {
  return is_nan(mind) ? A(-1) : mind;
}

}  // namespace pcgeom
