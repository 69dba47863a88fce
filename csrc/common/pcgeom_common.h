// Helpers shared by every pcgeom kernel, CPU and CUDA alike.
//
// The numeric rules that make pcgeom's answers identical on every path live
// here, once:
//   * squared distances are sums of squared coordinate differences, accumulated
//     in coordinate order (never the |a|^2+|b|^2-2ab expansion), in float32 for
//     float16/bfloat16/float32 inputs and in float64 for float64 inputs;
//   * distances are ordered ascending, NaN after +inf, ties by the lower index.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#if defined(__CUDACC__)
#define PCGEOM_HD __host__ __device__ __forceinline__
#else
#define PCGEOM_HD inline
#endif

namespace pcgeom {

template <typename T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};
template <typename T>
using acc_t = typename AccType<T>::type;

template <typename A>
PCGEOM_HD bool is_nan(A v) {
  return v != v;
}

// Strict "a ranks before b" on distances alone: ascending, NaN last.
template <typename A>
PCGEOM_HD bool dist_less(A a, A b) {
  return !is_nan(a) && (is_nan(b) || a < b);
}

// Strict order on (distance, index) keys; keys are unique because indices are.
template <typename A>
PCGEOM_HD bool key_less(A da, int64_t ia, A db, int64_t ib) {
  if (dist_less(da, db)) return true;
  if (dist_less(db, da)) return false;
  return ia < ib;
}

template <typename T, typename A = acc_t<T>>
PCGEOM_HD A sq_dist(const T* a, const T* b, int64_t D) {
  A acc = A(0);
  for (int64_t d = 0; d < D; ++d) {
    const A diff = static_cast<A>(a[d]) - static_cast<A>(b[d]);
    acc += diff * diff;
  }
  return acc;
}

template <typename A>
PCGEOM_HD A pos_inf() {
  return std::numeric_limits<A>::infinity();
}

}  // namespace pcgeom

// Calls BODY with `scalar_t` bound to the C++ type of a floating dtype.
// The stable ABI has no AT_DISPATCH, so this is the one switch every kernel uses.
#define PCGEOM_DISPATCH_FLOATING(STYPE, NAME, ...)                                \
  [&] {                                                                          \
    switch (STYPE) {                                                             \
      case torch::headeronly::ScalarType::Float: {                               \
        using scalar_t = float;                                                  \
        return __VA_ARGS__();                                                    \
      }                                                                          \
      case torch::headeronly::ScalarType::Double: {                              \
        using scalar_t = double;                                                 \
        return __VA_ARGS__();                                                    \
      }                                                                          \
      case torch::headeronly::ScalarType::Half: {                                \
        using scalar_t = c10::Half;                                              \
        return __VA_ARGS__();                                                    \
      }                                                                          \
      case torch::headeronly::ScalarType::BFloat16: {                            \
        using scalar_t = c10::BFloat16;                                          \
        return __VA_ARGS__();                                                    \
      }                                                                          \
      default:                                                                   \
        STD_TORCH_CHECK(false, NAME,                                             \
                        ": expected a float16, bfloat16, float32 or float64 tensor"); \
    }                                                                            \
  }()
