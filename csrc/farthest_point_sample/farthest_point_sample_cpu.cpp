// CPU kernel of pcgeom::farthest_point_sample (exact greedy FPS, one cloud per task).
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "farthest_point_sample/farthest_point_sample_common.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

template <typename T>
void fps_vanilla(const T* p, int64_t N, int64_t D, int64_t L, int64_t S, int64_t start,
                 int64_t* out) {
  using A = acc_t<T>;
  std::vector<A> mind(L, pos_inf<A>());
  const int64_t take = std::min(S, L);
  int64_t cur = start;
  for (int64_t s = 0; s < take; ++s) {
    out[s] = cur;
    if (s + 1 == take) break;
    mind[cur] = fps_chosen<A>();
    const T* pc = p + cur * D;
    A best_key = fps_chosen<A>();
    int64_t best = -1;
    for (int64_t j = 0; j < L; ++j) {
      const A m = fps_update(mind[j], sq_dist<T, A>(p + j * D, pc, D));
      mind[j] = m;
      const A key = fps_key(m);
      if (best < 0 || key > best_key) {
        best_key = key;
        best = j;
      }
    }
    cur = best;
  }
  for (int64_t s = take; s < S; ++s) out[s] = -1;
}

Tensor farthest_point_sample_cpu(Tensor points_in, int64_t n_samples, Tensor lengths_in,
                                 Tensor start_in) {
  const char* op = "farthest_point_sample";
  check_rank(points_in, 3, op, "points");
  const int64_t B = points_in.size(0), N = points_in.size(1), D = points_in.size(2);
  STD_TORCH_CHECK(n_samples >= 0, op, ": n_samples must be >= 0, got ", n_samples);
  check_int64_vector(lengths_in, B, op, "lengths");
  check_int64_vector(start_in, B, op, "start_index");
  const Tensor points = torch::stable::contiguous(points_in);
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
                                    std::nullopt, points.device());
  if (out.numel() == 0) return out;
  int64_t* o = out.mutable_data_ptr<int64_t>();
  PCGEOM_DISPATCH_FLOATING(points.scalar_type(), op, [&] {
    const scalar_t* p = points.const_data_ptr<scalar_t>();
    torch::stable::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        fps_vanilla<scalar_t>(p + b * N * D, N, D, L[b], n_samples, st[b], o + b * n_samples);
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("farthest_point_sample", TORCH_BOX(&pcgeom::farthest_point_sample_cpu));
}
