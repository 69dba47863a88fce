// Device-wide sorting and segmenting helpers for the CUDA kernels (one
// translation unit instantiates CUB, so its heavy templates compile once).
//
// build_slot_index() inverts a neighbour-index tensor: for every target point,
// the slots that point at it, in increasing slot order.  Backward kernels
// (knn_backward w.r.t. points, knn_gather_backward) sum one contribution per
// slot into its target.  Atomics would make that sum depend on thread timing;
// walking each target's slots in slot order instead reproduces the CPU
// kernels' accumulation order exactly, so the gradients are deterministic and
// bit-identical to the CPU path.
#pragma once

#include <cstdint>

#include <torch/csrc/stable/tensor.h>

#include "common/cuda_utils.cuh"  // cudaStream_t (real or emulated)

namespace pcgeom {
namespace cuda {

// Stable LSD radix sort of (key, value) pairs on bits [0, end_bit) of the keys,
// on `stream`.  `like` gives the device for the scratch buffer.
void sort_pairs(const unsigned long long* keys_in, unsigned long long* keys_out,
                const int64_t* vals_in, int64_t* vals_out, int64_t count, int end_bit,
                cudaStream_t stream, const torch::stable::Tensor& like, const char* op);
void sort_pairs(const unsigned long long* keys_in, unsigned long long* keys_out,
                const int32_t* vals_in, int32_t* vals_out, int64_t count, int end_bit,
                cudaStream_t stream, const torch::stable::Tensor& like, const char* op);

// start[t] = first position of `sorted_keys` (ascending, `count` long) whose key
// is >= t, for every t in [0, T]; so segment t is [start[t], start[t+1]).
void segment_starts(const unsigned long long* sorted_keys, int64_t count, int64_t T,
                    int64_t* start, cudaStream_t stream, const char* op);

// Number of bits needed to represent v (at least 1).
int bit_width(unsigned long long v);

struct SlotIndex {
  // int64 (B*R,): slot ids b*R + r, grouped by target b*n + j, ascending slot
  // id within a target.  Slots whose index is outside [0, n) come last.
  torch::stable::Tensor order;
  // int64 (B*n + 1,): target t's slots are order[start[t] : start[t+1]].
  torch::stable::Tensor start;
};

// idx: contiguous int64 CUDA tensor of B*R indices (B rows of R slots); values
// outside [0, n) -- the -1 padding, or anything invalid -- are ignored.
// Requires B*R > 0 and B*n > 0.
SlotIndex build_slot_index(const torch::stable::Tensor& idx, int64_t B, int64_t R, int64_t n,
                           cudaStream_t stream, const char* op);

}  // namespace cuda
}  // namespace pcgeom
