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

// Host-side range check of a CPU int64 vector (lengths, start indices).
inline void check_range_cpu(const int64_t* v, int64_t B, int64_t lo, int64_t hi, const char* op,
                            const char* name) {
  for (int64_t b = 0; b < B; ++b) {
    STD_TORCH_CHECK(v[b] >= lo && v[b] <= hi, op, ": ", name, "[", b, "]=", v[b],
                    " is outside [", lo, ", ", hi, "]");
  }
}

}  // namespace pcgeom
