// Sorting and segmenting on the device; see segments_cuda.h.
#include "common/segments_cuda.h"

#ifndef PCGEOM_CUDA_EMULATION
#include <cub/device/device_radix_sort.cuh>
#else
#include <algorithm>
#include <numeric>
#include <vector>
#endif

#include "common/cuda_utils.cuh"

namespace pcgeom {
namespace cuda {
namespace {

__global__ void slot_keys_kernel(const int64_t* __restrict__ idx, int64_t B, int64_t R, int64_t n,
                                 unsigned long long* __restrict__ keys,
                                 int64_t* __restrict__ vals) {
  const int64_t total = B * R;
  const unsigned long long invalid = static_cast<unsigned long long>(B * n);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx[i];
    const int64_t b = i / R;
    keys[i] = (j >= 0 && j < n) ? static_cast<unsigned long long>(b * n + j) : invalid;
    vals[i] = i;
  }
}

__global__ void segment_start_kernel(const unsigned long long* __restrict__ keys, int64_t count,
                                     int64_t T, int64_t* __restrict__ start) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t <= T;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = count;
    const unsigned long long key = static_cast<unsigned long long>(t);
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    start[t] = lo;
  }
}

template <typename V>
void sort_pairs_impl(const unsigned long long* keys_in, unsigned long long* keys_out,
                     const V* vals_in, V* vals_out, int64_t count, int end_bit,
                     cudaStream_t stream, const Tensor& like, const char* op) {
  if (count == 0) return;
#ifdef PCGEOM_CUDA_EMULATION
  // Emulator (host memory): a stable sort has the radix sort's exact result.
  (void)end_bit;
  (void)stream;
  (void)like;
  (void)op;
  std::vector<int64_t> perm(count);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t x, int64_t y) { return keys_in[x] < keys_in[y]; });
  for (int64_t i = 0; i < count; ++i) {
    keys_out[i] = keys_in[perm[i]];
    vals_out[i] = vals_in[perm[i]];
  }
#else
  size_t temp_bytes = 0;
  PCGEOM_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out,
                                                        vals_in, vals_out, count, 0, end_bit,
                                                        stream));
  Tensor temp = scratch_bytes(static_cast<int64_t>(temp_bytes), like);
  PCGEOM_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(temp.mutable_data_ptr<uint8_t>(),
                                                        temp_bytes, keys_in, keys_out, vals_in,
                                                        vals_out, count, 0, end_bit, stream));
#endif
}

}  // namespace

int bit_width(unsigned long long v) {
  int bits = 0;
  while (v != 0) {
    ++bits;
    v >>= 1;
  }
  return bits > 0 ? bits : 1;
}

void sort_pairs(const unsigned long long* keys_in, unsigned long long* keys_out,
                const int64_t* vals_in, int64_t* vals_out, int64_t count, int end_bit,
                cudaStream_t stream, const Tensor& like, const char* op) {
  sort_pairs_impl(keys_in, keys_out, vals_in, vals_out, count, end_bit, stream, like, op);
}

void sort_pairs(const unsigned long long* keys_in, unsigned long long* keys_out,
                const int32_t* vals_in, int32_t* vals_out, int64_t count, int end_bit,
                cudaStream_t stream, const Tensor& like, const char* op) {
  sort_pairs_impl(keys_in, keys_out, vals_in, vals_out, count, end_bit, stream, like, op);
}

void segment_starts(const unsigned long long* sorted_keys, int64_t count, int64_t T,
                    int64_t* start, cudaStream_t stream, const char* op) {
  segment_start_kernel<<<blocks_for(T + 1, 256), 256, 0, stream>>>(sorted_keys, count, T, start);
  check_launch(op, "segment_start_kernel");
}

SlotIndex build_slot_index(const Tensor& idx, int64_t B, int64_t R, int64_t n, cudaStream_t stream,
                           const char* op) {
  const int64_t count = B * R;
  const int64_t T = B * n;
  STD_TORCH_CHECK(count > 0 && T > 0, op, ": internal error, empty slot index requested");
  const auto i64 = torch::headeronly::ScalarType::Long;
  Tensor keys_in = torch::stable::empty({count}, i64, std::nullopt, idx.device());
  Tensor keys_out = torch::stable::empty({count}, i64, std::nullopt, idx.device());
  Tensor vals_in = torch::stable::empty({count}, i64, std::nullopt, idx.device());
  Tensor order = torch::stable::empty({count}, i64, std::nullopt, idx.device());
  Tensor start = torch::stable::empty({T + 1}, i64, std::nullopt, idx.device());
  auto* kin = reinterpret_cast<unsigned long long*>(keys_in.mutable_data_ptr<int64_t>());
  auto* kout = reinterpret_cast<unsigned long long*>(keys_out.mutable_data_ptr<int64_t>());

  slot_keys_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(
      idx.const_data_ptr<int64_t>(), B, R, n, kin, vals_in.mutable_data_ptr<int64_t>());
  check_launch(op, "slot_keys_kernel");
  // Keys are at most B*n (the bucket of ignored slots): sort only those bits.
  sort_pairs(kin, kout, vals_in.const_data_ptr<int64_t>(), order.mutable_data_ptr<int64_t>(), count,
             bit_width(static_cast<unsigned long long>(T)), stream, idx, op);
  segment_starts(kout, count, T, start.mutable_data_ptr<int64_t>(), stream, op);
  return SlotIndex{order, start};
}

}  // namespace cuda
}  // namespace pcgeom
