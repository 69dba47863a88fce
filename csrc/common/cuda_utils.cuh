// Host and device plumbing shared by every pcgeom CUDA kernel (stable ABI only:
// no ATen headers, so one binary keeps working across torch releases).
//
//   * current_stream(): the caller's current CUDA stream, from the C shim;
//   * check_launch() / PCGEOM_CUDA_CHECK: every launch and runtime call is
//     checked and turned into a Python RuntimeError naming the op -- never exit();
//   * check_same_cuda() / DeviceScope: every tensor argument is on the device of
//     the first one (a CPU lengths tensor read from a kernel would be an illegal
//     access), and that device is current while the op runs;
//   * clamp_len(): lengths read on the device are clamped into [0, n] so that a
//     direct torch.ops call with bad values can never read out of bounds (the
//     Python wrappers reject such values with a clear error first);
//   * PCGEOM_CUDA_KERNELS(m): the one registration block of each op's CUDA
//     kernels (the real CUDA key, or the emulator's namespace).
//
// PCGEOM_CUDA_EMULATION builds the same sources as plain C++ against a thread-
// per-CUDA-thread emulator (scripts/cuda_emu/), so that the kernels' logic can
// be executed and tested on machines without a GPU.  Kernel code therefore
// takes shared memory from dynamic_smem() and checks devices through the
// helpers below instead of spelling the CUDA specifics inline.
#pragma once

#ifndef PCGEOM_CUDA_EMULATION
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include "common/pcgeom_common.h"

#ifdef PCGEOM_CUDA_EMULATION
#include "cuda_emu.h"
#endif

// Opens the block that registers an op's CUDA kernels, once per .cu file:
//
//   PCGEOM_CUDA_KERNELS(m) {
//     m.impl("knn", TORCH_BOX(&pcgeom::cuda::knn_cuda));
//   }
//
// On a real build the kernels serve the CUDA key of torch.ops.pcgeom; under
// PCGEOM_CUDA_EMULATION (scripts/cuda_emu) the very same functions serve the
// CPU key of the emulator's own namespace, torch.ops.pcgeom_emu, so the tests
// can compare them with the CPU kernels.
#ifndef PCGEOM_CUDA_EMULATION
#define PCGEOM_CUDA_KERNELS(m) STABLE_TORCH_LIBRARY_IMPL(pcgeom, CUDA, m)
#else
#define PCGEOM_CUDA_KERNELS(m) STABLE_TORCH_LIBRARY_IMPL(pcgeom_emu, CPU, m)
#endif

namespace pcgeom {
namespace cuda {

using torch::stable::Tensor;

#ifndef PCGEOM_CUDA_EMULATION
using DeviceGuard = torch::stable::accelerator::DeviceGuard;

// The block's dynamic shared memory (sized by the launch).
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char pcgeom_dynamic_smem[];
  return pcgeom_dynamic_smem;
}

// A load that bypasses the (non-coherent) L1 cache: for polling a flag that
// other blocks update with atomics.
__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  return *reinterpret_cast<const volatile unsigned long long*>(p);
}

inline bool on_gpu(const Tensor& t) { return t.is_cuda(); }
inline int32_t gpu_index(const Tensor& t) { return t.get_device_index(); }

inline cudaStream_t current_stream(int32_t device_index) {
  void* stream = nullptr;
  STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(device_index, &stream) == AOTI_TORCH_SUCCESS,
                  "pcgeom: could not get the current CUDA stream of device ", device_index);
  return static_cast<cudaStream_t>(stream);
}
#else
struct DeviceGuard {
  explicit DeviceGuard(int32_t) {}
};
inline unsigned char* dynamic_smem() { return ::emu::block_smem(); }
inline unsigned long long load_relaxed(const unsigned long long* p) {
  return std::atomic_ref<unsigned long long>(*const_cast<unsigned long long*>(p)).load();
}
inline bool on_gpu(const Tensor& t) { return t.is_cpu(); }  // emulated "device" memory is host memory
inline int32_t gpu_index(const Tensor&) { return 0; }
inline cudaStream_t current_stream(int32_t) { return nullptr; }
#endif

inline void check_on_gpu(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(on_gpu(t), op, ": ", name, " must be a CUDA tensor");
}

// Bytes rounded up so that the next shared-memory region stays 16-byte aligned.
PCGEOM_HD int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

#define PCGEOM_CUDA_CHECK(OP, EXPR)                                                       \
  do {                                                                                    \
    const cudaError_t pcgeom_err_ = (EXPR);                                               \
    STD_TORCH_CHECK(pcgeom_err_ == cudaSuccess, OP, ": CUDA call `", #EXPR, "` failed: ", \
                    cudaGetErrorString(pcgeom_err_));                                     \
  } while (0)

// Called right after each <<<...>>>: reports bad launch configurations (and any
// earlier asynchronous error) with the op and kernel name.
inline void check_launch(const char* op, const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  STD_TORCH_CHECK(err == cudaSuccess, op, ": CUDA kernel ", kernel, " failed: ",
                  cudaGetErrorString(err));
}

inline void check_same_cuda(const Tensor& t, int32_t device, const char* op, const char* name) {
  STD_TORCH_CHECK(on_gpu(t) && gpu_index(t) == device, op, ": ", name,
                  " must be on the same CUDA device as the other inputs (cuda:", device, ")");
}

// The named tensor arguments of a CUDA entry point, for DeviceScope.
struct NamedTensor {
  const Tensor& tensor;
  const char* name;
};

// The device part of every CUDA entry point: each of `others` must be on the
// device of `first` (checked in the order given; the error names the op and the
// argument), and that device is current until the scope ends.  `first` itself
// is checked by the caller (check_on_gpu), where the op's order of checks puts
// it.  stream() is the caller's current stream there, asked for only when a
// kernel is about to be launched.
class DeviceScope {
 public:
  DeviceScope(const char* op, const Tensor& first, std::initializer_list<NamedTensor> others)
      : index_(same_device(op, first, others)), guard_(index_) {}
  int32_t index() const { return index_; }
  cudaStream_t stream() const { return current_stream(index_); }

 private:
  static int32_t same_device(const char* op, const Tensor& first,
                             std::initializer_list<NamedTensor> others) {
    const int32_t device = gpu_index(first);
    for (const NamedTensor& t : others) check_same_cuda(t.tensor, device, op, t.name);
    return device;
  }

  int32_t index_;
  DeviceGuard guard_;
};

inline int device_attribute(cudaDeviceAttr attr, int32_t device, const char* op) {
  int value = 0;
  PCGEOM_CUDA_CHECK(op, cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

// Number of blocks for a grid-stride loop over `work` items: enough to fill the
// device, never more than the work, never zero (callers skip empty launches).
inline unsigned int blocks_for(int64_t work, int threads, int64_t cap = int64_t(1) << 20) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(blocks, cap)));
}

// A scratch buffer on the device through torch's caching allocator, so it is
// ordered on the current stream and freed when the Tensor goes away.
inline Tensor scratch_bytes(int64_t bytes, const Tensor& like) {
  return torch::stable::empty({std::max<int64_t>(bytes, 1)}, torch::headeronly::ScalarType::Byte,
                              std::nullopt, like.device());
}

// Reads an environment switch that forces one of the kernel paths; tests use it
// to run every path on small inputs.  Unknown values are an error, not ignored.
inline std::string path_override(const char* env, const char* op,
                                 std::initializer_list<const char*> allowed) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return "auto";
  for (const char* a : allowed) {
    if (std::strcmp(v, a) == 0) return v;
  }
  std::string list;
  for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
  STD_TORCH_CHECK(false, op, ": environment variable ", env, "=", v, " is not one of: auto, ",
                  list);
  return "auto";
}

PCGEOM_HD int64_t clamp_len(int64_t v, int64_t n) { return v < 0 ? 0 : (v > n ? n : v); }

}  // namespace cuda
}  // namespace pcgeom
