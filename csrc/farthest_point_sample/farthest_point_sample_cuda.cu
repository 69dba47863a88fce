// CUDA kernel of pcgeom::farthest_point_sample (exact greedy FPS).
//
// The rules -- mind updates, "chosen" marking, NaN keys, argmax ties to the
// lowest index -- are the shared ones of farthest_point_sample_common.h, so the
// sequence is the CPU kernel's, index for index.  The argmax is a deterministic
// reduction over (key, index) pairs (higher key wins, then lower index): no
// atomics on values, so repeated runs agree too.
//
//   * one block per cloud (fps_block_kernel): the cloud's min-distances -- and,
//     when they fit, its points -- live in shared memory; used for small and
//     medium clouds, or many clouds at once;
//   * many blocks per cloud (fps_multi_kernel, a cooperative launch so that all
//     blocks are resident): each block owns a chunk of the cloud, publishes its
//     chunk's best pair, and after a grid-wide barrier every block reduces the
//     cloud's pairs itself -- one barrier per sample, for clouds of 10^5-10^7
//     points where one block would leave the GPU idle.
//
// lengths and start_index are read on the device and clamped into range, so a
// direct torch.ops call cannot read out of bounds (the Python wrapper rejects
// bad values first with a clear error, without a device sync here).
#include <algorithm>
#include <string>

#include <torch/csrc/stable/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "farthest_point_sample/farthest_point_sample_common.h"

namespace pcgeom {
namespace cuda {
namespace {

constexpr int kBlockThreadsMax = 1024;
constexpr int kMultiThreads = 512;
constexpr int kWarps = kBlockThreadsMax / 32;

// Shared scratch of the block argmax, at the start of dynamic shared memory:
// kWarps keys (8 bytes each, whatever A), kWarps indices, the broadcast index.
constexpr int64_t kReduceBytes = 2 * kWarps * 8 + 16;

template <typename A>
struct ReduceSmem {
  A* key;
  int64_t* idx;
  int64_t* cur;
  __device__ __forceinline__ explicit ReduceSmem(unsigned char* base)
      : key(reinterpret_cast<A*>(base)),
        idx(reinterpret_cast<int64_t*>(base + kWarps * 8)),
        cur(reinterpret_cast<int64_t*>(base + 2 * kWarps * 8)) {}
};

// Does (ka, ia) beat (kb, ib)?  idx < 0 marks "no candidate".
template <typename A>
__device__ __forceinline__ bool better(A ka, int64_t ia, A kb, int64_t ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return ka > kb || (ka == kb && ia < ib);
}

template <typename A>
__device__ __forceinline__ void warp_argmax(A& key, int64_t& idx) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const A ok = __shfl_down_sync(0xffffffffu, key, off);
    const long long oi = __shfl_down_sync(0xffffffffu, static_cast<long long>(idx), off);
    if (better(ok, static_cast<int64_t>(oi), key, idx)) {
      key = ok;
      idx = oi;
    }
  }
}

// Result in thread 0.  blockDim.x is a multiple of 32.  Begins with no barrier:
// callers guarantee the previous use of s_key/s_idx is finished.
template <typename A>
__device__ __forceinline__ void block_argmax(A& key, int64_t& idx, A* s_key, int64_t* s_idx) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  warp_argmax(key, idx);
  if (lane == 0) {
    s_key[warp] = key;
    s_idx[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    key = lane < nwarps ? s_key[lane] : fps_chosen<A>();
    idx = lane < nwarps ? s_idx[lane] : int64_t(-1);
    warp_argmax(key, idx);
  }
}

// Updates the min-distances of points [lo, hi) (this thread's share: lo + tid,
// step blockDim.x) against the newest sample `cur`; returns this thread's best.
template <typename T, typename A>
__device__ __forceinline__ void update_range(const T* pts, A* mind, int64_t lo, int64_t hi,
                                             int64_t D, int64_t cur, A& bk, int64_t& bi) {
  const T* pc = pts + cur * D;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    // The CPU marks mind[cur] chosen first; fps_update keeps it chosen.
    const A m = j == cur ? fps_chosen<A>() : fps_update(mind[j], sq_dist<T, A>(pts + j * D, pc, D));
    mind[j] = m;
    const A key = fps_key(m);
    if (bi < 0 || key > bk) {
      bk = key;
      bi = j;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreadsMax)
    fps_block_kernel(const T* __restrict__ p, const int64_t* __restrict__ lengths,
                     const int64_t* __restrict__ start, int64_t B, int64_t N, int64_t D, int64_t S,
                     int64_t* __restrict__ out, acc_t<T>* __restrict__ mind_global,
                     bool smem_mind, bool smem_points) {
  using A = acc_t<T>;
  unsigned char* smem = dynamic_smem();
  const ReduceSmem<A> red(smem);
  const int tid = threadIdx.x;
  // The argmax scratch, then mind (A is the wider type), then the points.
  A* mind_s = reinterpret_cast<A*>(smem + kReduceBytes);
  T* pts_s = reinterpret_cast<T*>(smem + kReduceBytes + (smem_mind ? N * sizeof(A) : 0));

  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const int64_t L = clamp_len(lengths[b], N);
    const int64_t take = S < L ? S : L;
    int64_t* ob = out + b * S;
    for (int64_t s = take + tid; s < S; s += blockDim.x) ob[s] = -1;
    if (take == 0) continue;
    A* mind = smem_mind ? mind_s : mind_global + b * N;
    const T* pts = p + b * N * D;
    if (smem_points) {
      for (int64_t e = tid; e < L * D; e += blockDim.x) pts_s[e] = pts[e];
      pts = pts_s;
    }
    for (int64_t j = tid; j < L; j += blockDim.x) mind[j] = pos_inf<A>();
    int64_t cur = clamp_len(start[b], L - 1);
    __syncthreads();
    for (int64_t s = 0; s < take; ++s) {
      if (tid == 0) ob[s] = cur;
      if (s + 1 == take) break;
      A bk = fps_chosen<A>();
      int64_t bi = -1;
      update_range(pts, mind, 0, L, D, cur, bk, bi);
      block_argmax(bk, bi, red.key, red.idx);
      if (tid == 0) *red.cur = bi;
      __syncthreads();
      cur = *red.cur;
    }
    __syncthreads();  // the next cloud reuses shared memory
  }
}

// All blocks arrive, then all leave; `target` = (number of calls so far) *
// gridDim.x.  Only valid under a cooperative launch (all blocks resident).
__device__ __forceinline__ void grid_barrier(unsigned long long* counter,
                                             unsigned long long target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1ULL);
    while (load_relaxed(counter) < target) __nanosleep(32);
    __threadfence();
  }
  __syncthreads();
}

template <typename T>
__global__ void __launch_bounds__(kMultiThreads)
    fps_multi_kernel(const T* __restrict__ p, const int64_t* __restrict__ lengths,
                     const int64_t* __restrict__ start, int64_t B, int64_t N, int64_t D, int64_t S,
                     int64_t* __restrict__ out, acc_t<T>* __restrict__ mind,
                     acc_t<T>* part_key, int64_t* part_idx, unsigned long long* counter,
                     int64_t per_cloud) {
  using A = acc_t<T>;
  const ReduceSmem<A> red(dynamic_smem());  // kReduceBytes of dynamic shared memory
  const int tid = threadIdx.x;
  const int64_t G = gridDim.x;  // == B * per_cloud
  const int64_t b = blockIdx.x / per_cloud;
  const int64_t part = blockIdx.x - b * per_cloud;
  const int64_t L = clamp_len(lengths[b], N);
  const int64_t take = S < L ? S : L;
  const int64_t chunk = (L + per_cloud - 1) / per_cloud;
  const int64_t lo = part * chunk < L ? part * chunk : L;
  const int64_t hi = lo + chunk < L ? lo + chunk : L;
  const T* pts = p + b * N * D;
  A* mb = mind + b * N;
  int64_t* ob = out + b * S;
  if (part == 0) {
    for (int64_t s = take + tid; s < S; s += blockDim.x) ob[s] = -1;
  }
  for (int64_t j = lo + tid; j < hi; j += blockDim.x) mb[j] = pos_inf<A>();
  int64_t cur = take > 0 ? clamp_len(start[b], L - 1) : 0;
  // The loop bound is the same in every block: barriers must match grid-wide.
  const int64_t steps = S < N ? S : N;
  for (int64_t s = 0; s < steps; ++s) {
    if (s < take && part == 0 && tid == 0) ob[s] = cur;
    if (s + 1 >= steps) break;
    const bool work = s + 1 < take;  // uniform within a cloud
    A bk = fps_chosen<A>();
    int64_t bi = -1;
    if (work) update_range(pts, mb, lo, hi, D, cur, bk, bi);
    block_argmax(bk, bi, red.key, red.idx);
    const int64_t slot = (s & 1) * G + blockIdx.x;  // double-buffered partials
    if (tid == 0) {
      __stcg(part_key + slot, bk);
      __stcg(reinterpret_cast<long long*>(part_idx) + slot, static_cast<long long>(bi));
    }
    grid_barrier(counter, static_cast<unsigned long long>(s + 1) * G);
    if (work) {
      A k2 = fps_chosen<A>();
      int64_t i2 = -1;
      const int64_t first = (s & 1) * G + b * per_cloud;
      for (int64_t q = tid; q < per_cloud; q += blockDim.x) {
        // __ldcg: skip L1, which is not coherent with the other blocks' writes.
        const A kk = __ldcg(part_key + first + q);
        const int64_t ii = __ldcg(reinterpret_cast<const long long*>(part_idx) + first + q);
        if (better(kk, ii, k2, i2)) {
          k2 = kk;
          i2 = ii;
        }
      }
      block_argmax(k2, i2, red.key, red.idx);
      if (tid == 0) *red.cur = i2;
      __syncthreads();
      cur = *red.cur;
    }
  }
}

struct Launch {
  bool multi = false;
  int64_t per_cloud = 1;
};

template <typename T>
Launch choose_path(int64_t B, int64_t N, int32_t dev, const char* op) {
  const std::string mode =
      path_override("PCGEOM_CUDA_FPS_PATH", op, {"single", "multi"});
  Launch l;
  if (mode == "single" || N < 2) return l;
  if (mode == "auto" && N < 65536) return l;
  if (!device_attribute(cudaDevAttrCooperativeLaunch, dev, op)) return l;
  int per_sm = 0;
  PCGEOM_CUDA_CHECK(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                            &per_sm, fps_multi_kernel<T>, kMultiThreads, kReduceBytes));
  const int64_t resident =
      int64_t(per_sm) * device_attribute(cudaDevAttrMultiProcessorCount, dev, op);
  // Chunks of at least a few thousand points (fewer only when forced, for tests).
  const int64_t min_chunk = mode == "multi" ? 32 : 4096;
  const int64_t per_cloud = std::min(resident / std::max<int64_t>(B, 1),
                                     (N + min_chunk - 1) / min_chunk);
  if (per_cloud < (mode == "multi" ? 1 : 2)) return l;
  l.multi = true;
  l.per_cloud = per_cloud;
  return l;
}

template <typename T>
void fps_launch(const Tensor& points, const Tensor& lengths, const Tensor& start, int64_t S,
                Tensor& out, int32_t dev, cudaStream_t stream, const char* op) {
  using A = acc_t<T>;
  const int64_t B = points.size(0), N = points.size(1), D = points.size(2);
  const T* p = points.const_data_ptr<T>();
  const int64_t* L = lengths.const_data_ptr<int64_t>();
  const int64_t* st = start.const_data_ptr<int64_t>();
  int64_t* o = out.mutable_data_ptr<int64_t>();
  const auto acc = std::is_same<A, double>::value ? torch::headeronly::ScalarType::Double
                                                  : torch::headeronly::ScalarType::Float;
  const Launch l = choose_path<T>(B, N, dev, op);
  if (l.multi) {
    const int64_t G = B * l.per_cloud;
    Tensor mind = torch::stable::empty({B * N}, acc, std::nullopt, points.device());
    Tensor part_key = torch::stable::empty({2 * G}, acc, std::nullopt, points.device());
    Tensor part_idx = torch::stable::empty({2 * G}, torch::headeronly::ScalarType::Long,
                                           std::nullopt, points.device());
    Tensor counter = torch::stable::empty({1}, torch::headeronly::ScalarType::Long, std::nullopt,
                                          points.device());
    PCGEOM_CUDA_CHECK(op, cudaMemsetAsync(counter.mutable_data_ptr(), 0, 8, stream));
    A* mind_p = static_cast<A*>(mind.mutable_data_ptr());
    A* pk = static_cast<A*>(part_key.mutable_data_ptr());
    int64_t* pi = part_idx.mutable_data_ptr<int64_t>();
    auto* ctr = static_cast<unsigned long long*>(counter.mutable_data_ptr());
    int64_t per_cloud = l.per_cloud;
    int64_t Bv = B, Nv = N, Dv = D, Sv = S;
    void* args[] = {&p, &L, &st, &Bv, &Nv, &Dv, &Sv, &o, &mind_p, &pk, &pi, &ctr, &per_cloud};
    PCGEOM_CUDA_CHECK(op, cudaLaunchCooperativeKernel(fps_multi_kernel<T>,
                                                      dim3(static_cast<unsigned int>(G)),
                                                      dim3(kMultiThreads), args, kReduceBytes, stream));
    check_launch(op, "fps_multi_kernel");
    return;
  }
  // One block per cloud.  Shared memory holds the min-distances and, when they
  // also fit, the points (re-read every iteration); otherwise global memory.
  const int threads = static_cast<int>(
      std::max<int64_t>(32, std::min<int64_t>(kBlockThreadsMax, (N + 31) / 32 * 32)));
  const int64_t optin = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, dev, op);
  const int64_t budget = optin - kReduceBytes;
  const int64_t mind_bytes = N * static_cast<int64_t>(sizeof(A));
  const int64_t pts_bytes = N * D * static_cast<int64_t>(sizeof(T));
  const bool smem_mind = mind_bytes <= budget;
  const bool smem_points = smem_mind && mind_bytes + pts_bytes <= budget;
  const int64_t smem =
      kReduceBytes + (smem_mind ? mind_bytes : 0) + (smem_points ? pts_bytes : 0);
  if (smem > 48 * 1024) {
    PCGEOM_CUDA_CHECK(op, cudaFuncSetAttribute(fps_block_kernel<T>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem)));
  }
  Tensor mind;
  A* mind_p = nullptr;
  if (!smem_mind) {
    mind = torch::stable::empty({B * N}, acc, std::nullopt, points.device());
    mind_p = static_cast<A*>(mind.mutable_data_ptr());
  }
  const unsigned int blocks = static_cast<unsigned int>(std::min<int64_t>(B, int64_t(1) << 20));
  fps_block_kernel<T><<<blocks, threads, static_cast<size_t>(smem), stream>>>(
      p, L, st, B, N, D, S, o, mind_p, smem_mind, smem_points);
  check_launch(op, "fps_block_kernel");
}

Tensor farthest_point_sample_cuda(Tensor points_in, int64_t n_samples, Tensor lengths_in,
                                  Tensor start_in) {
  const char* op = "farthest_point_sample";
  check_rank(points_in, 3, op, "points", "(B, N, D)");
  const int64_t B = points_in.size(0);
  STD_TORCH_CHECK(n_samples >= 0, op, ": n_samples must be >= 0, got ", n_samples);
  check_float_tensor(points_in, op, "points");
  check_int64_vector(lengths_in, B, op, "lengths");
  check_int64_vector(start_in, B, op, "start_index");
  check_on_gpu(points_in, op, "points");
  const DeviceScope device(op, points_in, {{lengths_in, "lengths"}, {start_in, "start_index"}});
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor lengths = torch::stable::contiguous(lengths_in);
  const Tensor start = torch::stable::contiguous(start_in);
  // Lengths and start indices are not read on the host (no sync): the kernels
  // clamp them into range (clamp_len), so bad values cannot read out of bounds.
  Tensor out = alloc_output({B, n_samples}, torch::headeronly::ScalarType::Long, points, op,
                            "n_samples", n_samples, "the indices", 8);
  if (out.numel() == 0) return out;
  const cudaStream_t stream = device.stream();
  PCGEOM_DISPATCH_FLOATING(points.scalar_type(), op, [&] {
    fps_launch<scalar_t>(points, lengths, start, n_samples, out, device.index(), stream, op);
  });
  return out;
}

}  // namespace
}  // namespace cuda
}  // namespace pcgeom

PCGEOM_CUDA_KERNELS(m) {
  m.impl("farthest_point_sample", TORCH_BOX(&pcgeom::cuda::farthest_point_sample_cuda));
}
