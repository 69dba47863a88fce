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

#include <vector>

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

template <typename A>
void fps_cloud(const A* p, int64_t D, int64_t L, int64_t S, int64_t start, int64_t* out) {
  for (int64_t s = std::min(S, L); s < S; ++s) out[s] = -1;
  if (L == 0 || S == 0) return;
  bool finite = true;
  for (int64_t i = 0; i < L * D && finite; ++i) finite = std::isfinite(p[i]);
  if (!finite) {
    cpu::fps_generic<A>(p, D, L, S, start, out);
    return;
  }
  if (use_bucket(D, L, S) && L < (int64_t(1) << 31) - 1) {
    switch (D) {
#define PCGEOM_FPS_CASE(DD)                           \
  case DD: {                                          \
    cpu::FpsBucket<DD, A> fb;                         \
    fb.run(p, L, S, start, out);                      \
    return;                                           \
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

template <typename A>
void fps_batch(const A* p, int64_t B, int64_t N, int64_t D, const int64_t* L, const int64_t* st,
               int64_t S, int64_t* o) {
  // One cloud per task; small clouds are batched into one task so that a
  // light call does not pay for waking threads.
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) work += L[b] * std::min(S, L[b]) * D;
  const int64_t grain = work / std::max<int64_t>(1, B) > 20000 ? 1 : B;
  torch::stable::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      fps_cloud<A>(p + b * N * D, D, L[b], S, st[b], o + b * S);
    }
  });
}

Tensor farthest_point_sample_cpu(Tensor points_in, int64_t n_samples, Tensor lengths_in,
                                 Tensor start_in) {
  const char* op = "farthest_point_sample";
  check_rank(points_in, 3, op, "points");
  const int64_t B = points_in.size(0), N = points_in.size(1), D = points_in.size(2);
  STD_TORCH_CHECK(n_samples >= 0, op, ": n_samples must be >= 0, got ", n_samples);
  check_int64_vector(lengths_in, B, op, "lengths");
  check_int64_vector(start_in, B, op, "start_index");
  const auto dtype = points_in.scalar_type();
  STD_TORCH_CHECK(dtype == torch::headeronly::ScalarType::Float ||
                      dtype == torch::headeronly::ScalarType::Double ||
                      dtype == torch::headeronly::ScalarType::Half ||
                      dtype == torch::headeronly::ScalarType::BFloat16,
                  op, ": expected a float16, bfloat16, float32 or float64 tensor");
  const Tensor lengths = torch::stable::contiguous(lengths_in);
  const Tensor start = torch::stable::contiguous(start_in);
  const int64_t* L = lengths.const_data_ptr<int64_t>();
  const int64_t* st = start.const_data_ptr<int64_t>();
  check_range_cpu(L, B, 0, N, op, "lengths");
  for (int64_t b = 0; b < B; ++b) {
    STD_TORCH_CHECK(L[b] == 0 || (st[b] >= 0 && st[b] < L[b]), op, ": start_index[", b, "]=",
                    st[b], " is outside [0, ", L[b], ")");
  }
  Tensor out = torch::stable::empty({B, n_samples}, torch::headeronly::ScalarType::Long,
                                    std::nullopt, points_in.device());
  if (out.numel() == 0) return out;
  // Distances accumulate in float32 for half precision: an exact float32 copy
  // gives the same numbers with one code path.
  const bool is_double = dtype == torch::headeronly::ScalarType::Double;
  Tensor points = is_double || dtype == torch::headeronly::ScalarType::Float
                      ? points_in
                      : torch::stable::to(points_in, torch::headeronly::ScalarType::Float);
  points = torch::stable::contiguous(points);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  if (is_double) {
    fps_batch<double>(points.const_data_ptr<double>(), B, N, D, L, st, n_samples, o);
  } else {
    fps_batch<float>(points.const_data_ptr<float>(), B, N, D, L, st, n_samples, o);
  }
  return out;
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("farthest_point_sample", TORCH_BOX(&pcgeom::farthest_point_sample_cpu));
}
