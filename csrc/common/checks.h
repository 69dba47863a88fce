// Argument checks shared by the host side of every kernel.  The Python wrappers
// validate first with friendlier messages; these guard direct torch.ops calls so
// that bad input is an error, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <string>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

namespace pcgeom {

using torch::stable::Tensor;

inline void check_rank(const Tensor& t, int64_t rank, const char* op, const char* name) {
  STD_TORCH_CHECK(t.dim() == rank, op, ": ", name, " must have ", rank, " dimensions, got ",
                  t.dim());
}

inline void check_int64_vector(const Tensor& t, int64_t B, const char* op, const char* name) {
  STD_TORCH_CHECK(t.dim() == 1 && t.size(0) == B, op, ": ", name, " must have shape (", B,
                  ",), got a tensor with ", t.dim(), " dimensions");
  STD_TORCH_CHECK(t.scalar_type() == torch::headeronly::ScalarType::Long, op, ": ", name,
                  " must be int64");
}

// The checks every search kernel (knn, ball_query; CPU and CUDA) opens with:
// (B, M, D) queries and (B, N, D) points of one floating dtype, k >= 1, and
// int64 (B,) lengths.  Ranges of the lengths are checked where they are read.
inline void check_search_args(const Tensor& query, const Tensor& points, int64_t k,
                              const Tensor& query_lengths, const Tensor& points_lengths,
                              const char* op) {
  using torch::headeronly::ScalarType;
  check_rank(query, 3, op, "query");
  check_rank(points, 3, op, "points");
  const int64_t B = query.size(0);
  STD_TORCH_CHECK(points.size(0) == B && points.size(2) == query.size(2), op,
                  ": query and points must share batch size and dimension");
  STD_TORCH_CHECK(query.scalar_type() == points.scalar_type(), op,
                  ": query and points must have the same dtype");
  STD_TORCH_CHECK(k >= 1, op, ": k must be >= 1, got ", k);
  check_int64_vector(query_lengths, B, op, "query_lengths");
  check_int64_vector(points_lengths, B, op, "points_lengths");
  const auto dtype = query.scalar_type();
  STD_TORCH_CHECK(dtype == ScalarType::Float || dtype == ScalarType::Double ||
                      dtype == ScalarType::Half || dtype == ScalarType::BFloat16,
                  op, ": expected a float16, bfloat16, float32 or float64 tensor");
}

// Host-side range check of a CPU int64 vector (lengths, start indices).
inline void check_range_cpu(const int64_t* v, int64_t B, int64_t lo, int64_t hi, const char* op,
                            const char* name) {
  for (int64_t b = 0; b < B; ++b) {
    STD_TORCH_CHECK(v[b] >= lo && v[b] <= hi, op, ": ", name, "[", b, "]=", v[b],
                    " is outside [", lo, ", ", hi, "]");
  }
}

}  // namespace pcgeom
