// A small CUDA execution emulator: runs pcgeom's CUDA kernels as plain C++ on
// the CPU, one OS thread per CUDA thread, so that their logic -- indexing,
// bounds, shared-memory barriers, warp shuffles, the grid search, the
// cooperative FPS barrier -- can be executed and checked on machines without a
// GPU (see scripts/cuda_emu/build.py).  It is a test tool, never shipped.
//
// Semantics kept: __syncthreads is a real barrier of the block's threads (an
// exited thread drops out, as on hardware); __shfl_down_sync exchanges values
// inside a warp of 32; shared memory is one buffer per block; a cooperative
// launch runs all blocks at once, so grid-wide barriers work; ordinary launches
// run blocks one after another.  Device memory is host memory: build with
// -fsanitize=address and out-of-bounds accesses are reported like memcheck.
#pragma once

#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

using std::isfinite;  // a global device function in CUDA

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorCooperativeLaunchTooLarge = 720 };
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount,
  cudaDevAttrMaxSharedMemoryPerBlockOptin,
  cudaDevAttrCooperativeLaunch
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "emulated CUDA error";
}

namespace emu {

// Emulated device: small, so that multi-block paths are exercised with few threads.
constexpr int kSMs = 2;
constexpr int kBlocksPerSM = 2;
inline int64_t smem_optin() {
  const char* v = std::getenv("PCGEOM_EMU_SMEM_OPTIN");
  return v ? std::atoll(v) : 101376;
}

struct Block {
  unsigned int threads;
  std::unique_ptr<unsigned char[]> smem;
  size_t smem_bytes;
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  std::vector<std::array<uint64_t, 32>> warp_buf;

  Block(unsigned int n, size_t bytes) : threads(n), smem_bytes(bytes) {
    // Poison shared memory: kernels must not read what they did not write.
    smem.reset(new unsigned char[bytes + 16]);
    std::memset(smem.get(), 0xA5, bytes + 16);
    bar = std::make_unique<std::barrier<>>(n);
    const unsigned int warps = (n + 31) / 32;
    warp_buf.resize(warps);
    for (unsigned int w = 0; w < warps; ++w) {
      const unsigned int lanes = (w + 1) * 32 <= n ? 32 : n - w * 32;
      warp_bar.push_back(std::make_unique<std::barrier<>>(lanes));
    }
  }
};

inline thread_local Block* tl_block = nullptr;
inline thread_local dim3 tl_tid, tl_bid, tl_bdim, tl_gdim;
inline std::atomic<int> g_error{0};

inline unsigned char* block_smem() {
  // Assumes 16-byte alignment like CUDA's dynamic shared memory.
  auto p = reinterpret_cast<uintptr_t>(tl_block->smem.get());
  return reinterpret_cast<unsigned char*>((p + 15) & ~uintptr_t(15));
}

inline void syncthreads() { tl_block->bar->arrive_and_wait(); }

template <typename T>
T shfl_down(T v, int off) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  Block* b = tl_block;
  const unsigned int lane = tl_tid.x % 32, w = tl_tid.x / 32;
  std::memcpy(&b->warp_buf[w][lane], &v, sizeof(T));
  b->warp_bar[w]->arrive_and_wait();
  T r = v;
  if (lane + off < 32 && w * 32 + lane + off < b->threads) std::memcpy(&r, &b->warp_buf[w][lane + off], sizeof(T));
  b->warp_bar[w]->arrive_and_wait();
  return r;
}

// Runs `body` as every thread of one block; the block's threads are OS threads.
template <typename F>
void run_blocks(const std::vector<unsigned int>& block_ids, dim3 grid, dim3 block, size_t smem, F& body) {
  std::vector<std::unique_ptr<Block>> blocks;
  for (size_t i = 0; i < block_ids.size(); ++i) blocks.push_back(std::make_unique<Block>(block.x, smem));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < block_ids.size(); ++i) {
    for (unsigned int t = 0; t < block.x; ++t) {
      threads.emplace_back([&, i, t] {
        tl_block = blocks[i].get();
        tl_tid = dim3(t);
        tl_bid = dim3(block_ids[i]);
        tl_bdim = block;
        tl_gdim = grid;
        body();
        // A finished thread no longer takes part in barriers (as on hardware).
        tl_block->warp_bar[t / 32]->arrive_and_drop();
        tl_block->bar->arrive_and_drop();
      });
    }
  }
  for (auto& th : threads) th.join();
}

template <typename F>
void run_grid(dim3 grid, dim3 block, size_t smem, bool cooperative, F body) {
  if (grid.x == 0 || block.x == 0 || block.x > 1024 || grid.y != 1 || grid.z != 1 || block.y != 1 ||
      block.z != 1 || static_cast<int64_t>(smem) > smem_optin()) {
    g_error = cudaErrorInvalidValue;
    return;
  }
  if (cooperative) {
    std::vector<unsigned int> all(grid.x);
    for (unsigned int b = 0; b < grid.x; ++b) all[b] = b;
    run_blocks(all, grid, block, smem, body);
    return;
  }
  // Blocks one after another on one pool of block.x threads.
  std::unique_ptr<Block> cur;
  std::barrier<> gate(block.x);
  std::vector<std::thread> threads;
  for (unsigned int t = 0; t < block.x; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned int b = 0; b < grid.x; ++b) {
        if (t == 0) cur = std::make_unique<Block>(block.x, smem);
        gate.arrive_and_wait();
        tl_block = cur.get();
        tl_tid = dim3(t);
        tl_bid = dim3(b);
        tl_bdim = block;
        tl_gdim = grid;
        body();
        tl_block->warp_bar[t / 32]->arrive_and_drop();
        tl_block->bar->arrive_and_drop();
        gate.arrive_and_wait();
      }
    });
  }
  for (auto& th : threads) th.join();
}

// kernel<<<grid, block, smem, stream>>>(args...) is rewritten by build.py into
// emu::launch(grid, block, smem, stream, kernel, args...).
template <typename... P, typename... A>
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t, void (*kernel)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
  std::tuple<std::decay_t<P>...> params{static_cast<std::decay_t<P>>(args)...};
  run_grid(grid, block, smem, false, [&] { std::apply(kernel, params); });
}

template <typename... P, size_t... I>
void call_with(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<std::decay_t<P>*>(args[I])...);
}

}  // namespace emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define threadIdx (::emu::tl_tid)
#define blockIdx (::emu::tl_bid)
#define blockDim (::emu::tl_bdim)
#define gridDim (::emu::tl_gdim)

inline void __syncthreads() { ::emu::syncthreads(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned int) { std::this_thread::yield(); }
template <typename T>
T __shfl_down_sync(unsigned int, T v, int off) {
  return ::emu::shfl_down(v, off);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
template <typename T>
T __ldcg(const T* p) {
  return std::atomic_ref<T>(*const_cast<T*>(p)).load();
}
template <typename T>
void __stcg(T* p, T v) {
  std::atomic_ref<T>(*p).store(v);
}

inline cudaError_t cudaGetLastError() { return static_cast<cudaError_t>(::emu::g_error.exchange(0)); }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = ::emu::kSMs; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = static_cast<int>(::emu::smem_optin()); break;
    case cudaDevAttrCooperativeLaunch: *v = 1; break;
  }
  return cudaSuccess;
}
template <typename F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F*, int, size_t) {
  *n = ::emu::kBlocksPerSM;
  return cudaSuccess;
}
template <typename F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
template <typename... P>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t smem,
                                        cudaStream_t) {
  if (static_cast<int64_t>(grid.x) > ::emu::kSMs * ::emu::kBlocksPerSM) return cudaErrorCooperativeLaunchTooLarge;
  ::emu::run_grid(grid, block, smem, true,
                  [&] { ::emu::call_with(kernel, args, std::index_sequence_for<P...>{}); });
  return static_cast<cudaError_t>(::emu::g_error.exchange(0));
}
