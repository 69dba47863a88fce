// Argument checks shared by the host side of every kernel (CPU and CUDA).
//
// The Python wrappers validate first with friendlier messages; these guard
// direct torch.ops.pcgeom.* calls (users, torch.library.opcheck, compiled
// graphs) so that bad input is a RuntimeError that names the op, the argument,
// what was expected and what was given -- never an out-of-bounds read.  Every
// entry point checks ranks, batch / dimension agreement, dtypes and devices of
// all of its tensors before it touches data; index values are checked where a
// kernel dereferences them (CPU: one pass over the indices; CUDA: the kernels
// treat an index outside [0, n) as padding, which needs no host sync).
//
// Outputs whose size comes from an integer argument (k, n_samples, n) are
// allocated through alloc_output(), so that an absurd value is an error naming
// the argument and the bytes it would need instead of an allocator failure.
// Exceptions thrown inside torch::stable::parallel_for are reported by torch
// as a bare "torch_parallel_for(...) API call failed"; parallel_for() below
// carries the original message across instead.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

namespace pcgeom {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;

inline std::string shape_str(const Tensor& t) {
  std::string s = "(";
  for (int64_t d = 0; d < t.dim(); ++d) {
    s += std::to_string(t.size(d));
    if (d + 1 < t.dim() || t.dim() == 1) s += t.dim() == 1 ? "," : ", ";
  }
  return s + ")";
}

inline const char* dtype_name(ScalarType st) {
  switch (st) {
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Half: return "float16";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Long: return "int64";
    case ScalarType::Int: return "int32";
    case ScalarType::Short: return "int16";
    case ScalarType::Char: return "int8";
    case ScalarType::Byte: return "uint8";
    case ScalarType::Bool: return "bool";
    default: return "a non-float, non-int64 dtype";
  }
}

inline bool is_float_dtype(ScalarType st) {
  return st == ScalarType::Float || st == ScalarType::Double || st == ScalarType::Half ||
         st == ScalarType::BFloat16;
}

inline void check_rank(const Tensor& t, int64_t rank, const char* op, const char* name,
                       const char* layout = nullptr) {
  STD_TORCH_CHECK(t.dim() == rank, op, ": ", name, " must have ", rank, " dimensions",
                  layout ? " " : "", layout ? layout : "", ", got shape ", shape_str(t));
}

// Size `dim` of `t` must equal `expected` (an agreement with another argument,
// spelt out in `what`, e.g. "the B of query").
inline void check_size(const Tensor& t, int64_t dim, int64_t expected, const char* op,
                       const char* name, const char* layout, const char* what) {
  STD_TORCH_CHECK(t.size(dim) == expected, op, ": ", name, " must have shape ", layout,
                  " with size ", expected, " in dimension ", dim, " (", what, "), got ",
                  shape_str(t));
}

inline void check_float_tensor(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(is_float_dtype(t.scalar_type()), op, ": ", name,
                  " must be float16, bfloat16, float32 or float64, got ",
                  dtype_name(t.scalar_type()));
}

inline void check_same_dtype(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                             const char* ref_name) {
  STD_TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the dtype of ",
                  ref_name, " (", dtype_name(ref.scalar_type()), "), got ",
                  dtype_name(t.scalar_type()));
}

inline void check_int64(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(t.scalar_type() == ScalarType::Long, op, ": ", name, " must be int64, got ",
                  dtype_name(t.scalar_type()));
}

// A CPU kernel reads every tensor argument on the host.
inline void check_cpu(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(t.is_cpu(), op, ": ", name,
                  " must be a CPU tensor like the other inputs, got one on device type ",
                  static_cast<int>(t.device().type()));
}

inline void check_int64_vector(const Tensor& t, int64_t B, const char* op, const char* name) {
  STD_TORCH_CHECK(t.dim() == 1 && t.size(0) == B, op, ": ", name, " must have shape (", B,
                  ",), got ", shape_str(t));
  check_int64(t, op, name);
}

// The checks every search kernel (knn, ball_query; CPU and CUDA) opens with:
// (B, M, D) queries and (B, N, D) points of one floating dtype, k >= 1, and
// int64 (B,) lengths.  Ranges of the lengths are checked where they are read.
inline void check_search_args(const Tensor& query, const Tensor& points, int64_t k,
                              const Tensor& query_lengths, const Tensor& points_lengths,
                              const char* op) {
  check_rank(query, 3, op, "query", "(B, M, D)");
  check_rank(points, 3, op, "points", "(B, N, D)");
  const int64_t B = query.size(0);
  check_size(points, 0, B, op, "points", "(B, N, D)", "the B of query");
  check_size(points, 2, query.size(2), op, "points", "(B, N, D)", "the D of query");
  check_float_tensor(query, op, "query");
  check_same_dtype(points, query, op, "points", "query");
  STD_TORCH_CHECK(k >= 1, op, ": k must be >= 1, got ", k);
  check_int64_vector(query_lengths, B, op, "query_lengths");
  check_int64_vector(points_lengths, B, op, "points_lengths");
}

// The checks knn_backward (CPU and CUDA) opens with: grad_dist2 and idx are
// (B, M, k) for the (B, M, D) query and (B, N, D) points they came from, one
// floating dtype, int64 idx.  Index values are checked where they are read.
inline void check_knn_backward_args(const Tensor& grad, const Tensor& query, const Tensor& points,
                                    const Tensor& idx, const char* op) {
  check_rank(grad, 3, op, "grad_dist2", "(B, M, k)");
  check_rank(query, 3, op, "query", "(B, M, D)");
  check_rank(points, 3, op, "points", "(B, N, D)");
  check_rank(idx, 3, op, "idx", "(B, M, k)");
  const int64_t B = query.size(0), M = query.size(1);
  check_size(points, 0, B, op, "points", "(B, N, D)", "the B of query");
  check_size(points, 2, query.size(2), op, "points", "(B, N, D)", "the D of query");
  check_size(idx, 0, B, op, "idx", "(B, M, k)", "the B of query");
  check_size(idx, 1, M, op, "idx", "(B, M, k)", "the M of query");
  check_size(grad, 0, B, op, "grad_dist2", "(B, M, k)", "the B of query");
  check_size(grad, 1, M, op, "grad_dist2", "(B, M, k)", "the M of query");
  check_size(grad, 2, idx.size(2), op, "grad_dist2", "(B, M, k)", "the k of idx");
  check_float_tensor(query, op, "query");
  check_same_dtype(points, query, op, "points", "query");
  check_same_dtype(grad, query, op, "grad_dist2", "query");
  check_int64(idx, op, "idx");
}

// Host-side range check of a CPU int64 vector (lengths, start indices).
inline void check_range_cpu(const int64_t* v, int64_t B, int64_t lo, int64_t hi, const char* op,
                            const char* name) {
  for (int64_t b = 0; b < B; ++b) {
    STD_TORCH_CHECK(v[b] >= lo && v[b] <= hi, op, ": ", name, "[", b, "]=", v[b],
                    " is outside [", lo, ", ", hi, "]");
  }
}

// Host-side range check of a CPU index tensor: every value in [-1, n).  One
// min/max pass (vectorises), then a second pass only to report the culprit.
inline void check_index_range_cpu(const int64_t* p, int64_t count, int64_t n, const char* op,
                                  const char* name) {
  int64_t lo = 0, hi = -1;
  for (int64_t i = 0; i < count; ++i) {
    lo = p[i] < lo ? p[i] : lo;
    hi = p[i] > hi ? p[i] : hi;
  }
  if (lo >= -1 && hi < n) return;
  for (int64_t i = 0; i < count; ++i) {
    STD_TORCH_CHECK(p[i] >= -1 && p[i] < n, op, ": ", name, " values must be in [-1, ", n,
                    "), got ", p[i], " at flat position ", i);
  }
}

// a * b for non-negative a, b; false when it overflows int64.
inline bool mul_fits(int64_t a, int64_t b, int64_t* out) {
  if (a != 0 && b > INT64_MAX / a) return false;
  *out = a * b;
  return true;
}

inline std::string bytes_str(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, units[u]);
  return buf;
}

// Allocates an output whose size is driven by an integer argument (`arg` =
// `value`, e.g. k or n_samples).  `bytes_per_elem` is what one element of the
// shape costs over all outputs of that shape (e.g. 4 + 8 for float32 dist2 and
// int64 idx), so the message states the whole need.  Overflowing or failing
// allocations are an error that names the argument and the size.
inline Tensor alloc_output(std::initializer_list<int64_t> shape, ScalarType dtype,
                           const Tensor& like, const char* op, const char* arg, int64_t value,
                           const char* what, int64_t bytes_per_elem) {
  int64_t elems = 1;
  bool overflow = false;
  double approx = 1.0;
  std::string dims;
  for (int64_t s : shape) {
    approx *= static_cast<double>(s);
    overflow = overflow || !mul_fits(elems, s, &elems);
    dims += (dims.empty() ? "" : ", ") + std::to_string(s);
  }
  int64_t bytes = 0;
  overflow = overflow || !mul_fits(elems, bytes_per_elem, &bytes);
  STD_TORCH_CHECK(!overflow, op, ": ", arg, "=", value, " is too large: ", what, " of shape (",
                  dims, ") would need ", bytes_str(approx * bytes_per_elem),
                  ", more than any address space holds");
  std::vector<int64_t> sizes(shape);
  try {
    return torch::stable::empty(sizes, dtype, std::nullopt, like.device());
  } catch (const std::exception&) {
    STD_TORCH_CHECK(false, op, ": ", arg, "=", value, " needs ", what, " of shape (", dims,
                    "), ", bytes_str(static_cast<double>(bytes)),
                    ", and allocating it failed on the input's device");
  }
  return Tensor();
}

// Below roughly this much work (distance evaluations) a loop runs inline:
// starting threads costs more, and a lot more on a busy machine.
constexpr int64_t kParallelWork = 1 << 15;

// Grain of a parallel_for whose items cost `cost_per_item` each.
inline int64_t grain_for(int64_t cost_per_item) {
  const int64_t cost = cost_per_item > 1 ? cost_per_item : 1;
  return kParallelWork / cost > 1 ? kParallelWork / cost : 1;
}

// torch::stable::parallel_for that keeps the message of an exception thrown by
// f (the stable shim would replace it with "torch_parallel_for(...) API call
// failed").  `op` names the op in an out-of-memory message.
template <class F>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f,
                         const char* op = "pcgeom") {
  std::exception_ptr error;
  std::mutex mu;
  auto guarded = [&](int64_t b, int64_t e) {
    try {
      f(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  };
  torch::stable::parallel_for(begin, end, grain, guarded);
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    STD_TORCH_CHECK(false, op,
                    ": the CPU kernel ran out of host memory for its working buffers "
                    "(see docs/guides/limits.md for what each op needs)");
  }
}

}  // namespace pcgeom
