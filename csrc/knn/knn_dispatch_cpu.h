// The one CPU KNN plan: which kernel serves a knn / ball_query call on CPU
// tensors, and which serves each cloud inside the tree and blocked kernels.
//
// Paths (every one returns the reference's answer bit for bit, so the plan
// only changes the time):
//   tree     D <= 8: a KD-tree per cloud (knn/knn_tree_cpu.h)
//   blocked  any D, meant for D > 8: GEMM candidate selection + exact
//            re-ranking (knn/knn_blocked_cpu.cpp)
//   tile     any D: vectorised exact distance tiles + partial selection
//            (knn/knn_tile_cpu.cpp)
//   brute    any D: the scalar scan of every point per query (knn_cpu.cpp);
//            the CUDA kernels call their direct path "brute" too
//
// The rule, per call (padded sizes M queries, N points) and then per cloud
// (its query count and its finite points):
//   * M or N >= 2^31 - 1: brute, whatever the override says (the other paths
//     store indices as int32);
//   * D <= 8: tree for a cloud with >= 256 finite points, 8k <= n and at least
//     tree_min(D) queries (192 for D <= 4; 2048 / 4096 / 6144 / 12288 for
//     D = 5 / 6 / 7 / 8, which need as many points too), else tile.  The tree
//     costs an O(n log n) build plus a per-query search that grows with k and,
//     on uniform data, steeply with D; tile costs O(n D) per query, so the
//     crossover is a number of queries per cloud (nearly independent of n in
//     3-D), and a cloud size as well from D = 5 on.  The rule only grows more
//     willing with more points and queries, so the padded sizes bound every
//     cloud: a call they rule out goes to tile whole, skipping the per-cloud
//     preparation;
//   * D > 8: blocked when N * D >= 2^18, 4k <= N, M >= 32 and (k <= 64 or
//     N * D >= 2^19), else tile: the GEMM runs at BLAS speed, but its
//     candidate bookkeeping and re-ranking only pay once tile rows are long
//     and deep enough, and grow with k while tile keeps its survivors near k.
//     Inside blocked, a cloud with < 64 finite points, 4k > n or < 16 queries
//     goes to tile (so do rows the GEMM cannot take: NaN/inf queries, clouds
//     whose norms could overflow -- the kernel's own fallback, not a choice).
// The thresholds come from forcing each kernel on shapes around them; the
// timings are in docs/concepts/backends.md ("The KNN plan").
//
// PCGEOM_CPU_KNN_PATH=auto|tree|blocked|tile|brute forces one kernel wherever
// it applies (tree: D <= 8 only; per cloud, tree and blocked still need one
// finite point), for tests and benchmarks.  Accepted as well: "scan" (the old
// name of brute), an empty value (auto), and the old variable name
// PCGEOM_KNN_CPU_PATH (read when PCGEOM_CPU_KNN_PATH is unset or empty).  Any
// other value is an error naming the op, like PCGEOM_CUDA_KNN_PATH on CUDA.
// torch.ops.pcgeom._knn_cpu_plan (knn_dispatch_cpu.cpp) reports the plan.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/checks.h"

namespace pcgeom {

// The values are the codes _knn_cpu_plan returns (tests map them to names).
enum class KnnPath : int64_t { kAuto = 0, kTree = 1, kBlocked = 2, kTile = 3, kBrute = 4 };

constexpr const char* kKnnPathNames[] = {"auto", "tree", "blocked", "tile", "brute"};
constexpr int64_t kMaxTreeDim = 8;

// The override: kAuto when unset.  Read once per call.
inline KnnPath knn_path_override(const char* op) {
  const char* env = "PCGEOM_CPU_KNN_PATH";
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') {
    env = "PCGEOM_KNN_CPU_PATH";
    v = std::getenv(env);
  }
  if (v == nullptr || *v == '\0') return KnnPath::kAuto;
  if (std::strcmp(v, "scan") == 0) return KnnPath::kBrute;
  for (int64_t i = 0; i < 5; ++i) {
    if (std::strcmp(v, kKnnPathNames[i]) == 0) return static_cast<KnnPath>(i);
  }
  STD_TORCH_CHECK(false, op, ": environment variable ", env, "=", v,
                  " is not one of: auto, tree, blocked, tile, brute (scan: the old name of brute)");
  return KnnPath::kAuto;
}

namespace knn_plan_detail {

inline int64_t tree_min(int64_t D) {
  switch (D) {
    case 5: return 2048;
    case 6: return 4096;
    case 7: return 6144;
    case 8: return 12288;
    default: return 192;  // D <= 4
  }
}

inline bool tree_pays(int64_t queries, int64_t points, int64_t D, int64_t K) {
  if (points < 256 || K * 8 > points) return false;
  const int64_t need = tree_min(D);
  if (D >= 5 && points < need) return false;
  return queries >= need;
}

inline bool blocked_pays(int64_t queries, int64_t points, int64_t D, int64_t K) {
  return points * D >= (int64_t(1) << 18) && 4 * K <= points && queries >= 32 &&
         (K <= 64 || points * D >= (int64_t(1) << 19));
}

}  // namespace knn_plan_detail

// The plan.  within == kAuto: a whole call, from its padded sizes (queries = M,
// points = N); answers tree (the tree kernel, which plans each cloud again),
// blocked (likewise), tile or brute.  within == kTree / kBlocked: one cloud
// inside that kernel (queries = the cloud's queries, points = its finite
// points); answers that kernel or tile.  `forced`: knn_path_override().
inline KnnPath plan(KnnPath within, int64_t queries, int64_t points, int64_t D, int64_t K,
                    KnnPath forced) {
  using namespace knn_plan_detail;
  if (within == KnnPath::kTree) {
    const bool tree = forced == KnnPath::kTree ? points > 0 : tree_pays(queries, points, D, K);
    return tree ? KnnPath::kTree : KnnPath::kTile;
  }
  if (within == KnnPath::kBlocked) {
    const bool blocked = forced == KnnPath::kBlocked
                             ? points > 0
                             : points >= 64 && 4 * K <= points && queries >= 16;
    return blocked ? KnnPath::kBlocked : KnnPath::kTile;
  }
  constexpr int64_t kInt32Rows = (int64_t(1) << 31) - 1;
  if (queries >= kInt32Rows || points >= kInt32Rows) return KnnPath::kBrute;
  const bool tree_dims = D >= 1 && D <= kMaxTreeDim;  // the tree kernel is compiled for these
  if (forced == KnnPath::kTree && tree_dims) return KnnPath::kTree;
  if (forced == KnnPath::kBlocked || forced == KnnPath::kTile || forced == KnnPath::kBrute) {
    return forced;
  }
  if (D <= kMaxTreeDim) {
    return tree_dims && tree_pays(queries, points, D, K) ? KnnPath::kTree : KnnPath::kTile;
  }
  return blocked_pays(queries, points, D, K) ? KnnPath::kBlocked : KnnPath::kTile;
}

}  // namespace pcgeom
