// Run-time choice of the CPU kernels' AVX2 copies.
//
// The wheel is built for baseline x86-64 (SSE2); the hot loops of the tile
// and tree KNN kernels and of the vanilla FPS loop are compiled a second time
// for AVX2 and picked here,
// once per process.  PCGEOM_CPU_NO_AVX2=1 keeps the baseline code (the tests
// use it so that both copies are checked against the reference on one
// machine).  Both copies compute the same formula, lane for lane, so the
// answers are identical either way.
#pragma once

#include <cstdlib>

namespace pcgeom {
namespace cpu {

inline bool use_avx2() {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  static const bool yes = __builtin_cpu_supports("avx2") && !std::getenv("PCGEOM_CPU_NO_AVX2");
  return yes;
#else
  return false;
#endif
}

}  // namespace cpu
}  // namespace pcgeom
