// CPU kernel of pcgeom::farthest_point_sample (exact greedy FPS).
//
// Per cloud, in parallel over the batch:
//   * finite clouds in D <= 8 with many points: the bucket variant (a KD-tree
//     whose subtrees are skipped when the new sample cannot lower any of their
//     minimum distances), sub-quadratic in practice;
//   * other finite clouds: the vectorised vanilla loop;
//   * clouds with NaN/inf coordinates: the literal reference loop.
// All three return the reference's index sequence (farthest_point_sample_common.h).
#include "farthest_point_sample/farthest_point_sample_cpu.h"

#include <new>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "farthest_point_sample/farthest_point_sample_common.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

// The tree pays for itself once clouds are a few thousand points and enough
// samples are drawn (the first samples touch every point either way).
inline bool use_bucket(int64_t D, int64_t L, int64_t S) {
  return D <= 8 && L >= 2048 && S >= 16;
}

// Host memory a kernel may plan to use for one cloud: half of what is
// available now (Linux; unlimited elsewhere).  Only the bucket variant, which
// needs about twice the vanilla loop's memory, consults it: a cloud too large
// for it runs the vanilla loop, which returns the same indices.
inline int64_t memory_budget() {
#if defined(__linux__)
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<int64_t>(pages) / 2 * page;
#endif
  return INT64_MAX;
}

template <typename T, typename A>
void fps_cloud(const T* p, int64_t D, int64_t L, int64_t S, int64_t start, int64_t* out,
               int64_t budget) {
  for (int64_t s = std::min(S, L); s < S; ++s) out[s] = -1;
  if (L == 0 || S == 0) return;
  bool finite = true;
  for (int64_t i = 0; i < L * D && finite; ++i) finite = std::isfinite(static_cast<A>(p[i]));
  if (!finite) {
    cpu::fps_generic<T, A>(p, D, L, S, start, out);
    return;
  }
  if (use_bucket(D, L, S) && L < (int64_t(1) << 31) - 1) {
    switch (D) {
#define PCGEOM_FPS_CASE(DD)                                                     \
  case DD: {                                                                    \
    if (L > budget / cpu::FpsBucket<DD, A>::bytes_per_point()) break;           \
    try {                                                                       \
      cpu::FpsBucket<DD, A> fb;                                                 \
      fb.run(p, L, S, start, out);                                              \
      return;                                                                   \
    } catch (const std::bad_alloc&) {                                           \
      break; /* the vanilla loop needs about half as much */                    \
    }                                                                           \
  }
      PCGEOM_FPS_CASE(1)
      PCGEOM_FPS_CASE(2)
      PCGEOM_FPS_CASE(3)
      PCGEOM_FPS_CASE(4)
      PCGEOM_FPS_CASE(5)
      PCGEOM_FPS_CASE(6)
      PCGEOM_FPS_CASE(7)
      PCGEOM_FPS_CASE(8)
#undef PCGEOM_FPS_CASE
      default:
        break;
    }
  }
  cpu::FpsVanilla<A> fv;
  fv.run(p, D, L, S, start, out);
}

template <typename T, typename A>
void fps_batch(const T* p, int64_t B, int64_t N, int64_t D, const int64_t* L, const int64_t* st,
               int64_t S, int64_t* o) {
  // One cloud per task; small clouds are batched into one task so that a
  // light call does not pay for waking threads.
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) work += L[b] * std::min<int64_t>(std::min(S, L[b]), 1 << 20) * D;
  const int64_t grain = work / std::max<int64_t>(1, B) > 20000 ? 1 : B;
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  const int64_t budget = memory_budget() / std::min(threads, std::max<int64_t>(1, B));
  const char* op = "farthest_point_sample";
  pcgeom::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      try {
        fps_cloud<T, A>(p + b * N * D, D, L[b], S, st[b], o + b * S, budget);
      } catch (const std::bad_alloc&) {
        STD_TORCH_CHECK(false, op, ": out of host memory for the working buffers of cloud ", b,
                        " (lengths[", b, "]=", L[b], " points, D=", D, "): the CPU kernel needs ",
                        bytes_str(static_cast<double>(L[b]) *
                                  cpu::FpsVanilla<A>::bytes_per_point(D)),
                        " beside the input");
      }
    }
  }, op);
}

Tensor farthest_point_sample_cpu(Tensor points_in, int64_t n_samples, Tensor lengths_in,
                                 Tensor start_in) {
  const char* op = "farthest_point_sample";
  check_rank(points_in, 3, op, "points", "(B, N, D)");
  const int64_t B = points_in.size(0), N = points_in.size(1), D = points_in.size(2);
  STD_TORCH_CHECK(n_samples >= 0, op, ": n_samples must be >= 0, got ", n_samples);
  check_float_tensor(points_in, op, "points");
  check_int64_vector(lengths_in, B, op, "lengths");
  check_int64_vector(start_in, B, op, "start_index");
  check_cpu(lengths_in, op, "lengths");
  check_cpu(start_in, op, "start_index");
  const auto dtype = points_in.scalar_type();
  const Tensor lengths = torch::stable::contiguous(lengths_in);
  const Tensor start = torch::stable::contiguous(start_in);
  const int64_t* L = lengths.const_data_ptr<int64_t>();
  const int64_t* st = start.const_data_ptr<int64_t>();
  check_range_cpu(L, B, 0, N, op, "lengths");
  for (int64_t b = 0; b < B; ++b) {
    STD_TORCH_CHECK(L[b] == 0 || (st[b] >= 0 && st[b] < L[b]), op, ": start_index[", b, "]=",
                    st[b], " is outside [0, ", L[b], ")");
  }
  Tensor out = alloc_output({B, n_samples}, torch::headeronly::ScalarType::Long, points_in, op,
                            "n_samples", n_samples, "the indices", 8);
  if (out.numel() == 0) return out;
  // float16/bfloat16 clouds are read in place and converted as the kernels
  // copy them (exact): distances accumulate in float32 with no float32 copy
  // of the whole input.
  const Tensor points = torch::stable::contiguous(points_in);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  PCGEOM_DISPATCH_FLOATING(dtype, op, [&] {
    fps_batch<scalar_t, acc_t<scalar_t>>(points.const_data_ptr<scalar_t>(), B, N, D, L, st,
                                         n_samples, o);
  });
  return out;
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("farthest_point_sample", TORCH_BOX(&pcgeom::farthest_point_sample_cpu));
}
