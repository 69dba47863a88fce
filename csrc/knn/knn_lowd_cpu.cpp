// The tree path of the CPU KNN search (D <= 8), the plan's "tree"
// (knn_dispatch_cpu.h): per cloud, the finite points go into a KD-tree
// (common/kdtree_cpu.h) searched a group of queries at a time
// (knn/knn_tree_cpu.h); the cloud's non-finite points are merged into each
// answer, and NaN/inf queries and clouds the plan keeps off the tree take the
// tile path.  Every distance kept is pcgeom::sq_dist's and the ranking is the
// pcgeom key order, so the answer is the reference's bit for bit.
#include "knn/knn_lowd_cpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/kdtree_cpu.h"
#include "common/topk_cpu.h"
#include "knn/knn_dispatch_cpu.h"
#include "knn/knn_problem_cpu.h"
#include "knn/knn_rows_cpu.h"
#include "knn/knn_tile_cpu.h"
#include "knn/knn_tree_cpu.h"

namespace pcgeom {

namespace {

using cpu::FiniteKey;
using cpu::FiniteTopK;
using cpu::KdBuilder;
using cpu::KdTree;
using cpu::offer;
using cpu::with_topk;
using cpu::write_row;

template <int D, typename A>
struct LowDCloud {
  bool use_tree = false;
  KdTree<D, A> tree;               // finite points
  std::vector<int32_t> nonfinite;  // valid points with a NaN/inf coordinate, ascending
  std::vector<int32_t> tree_q;     // queries searched in the tree, grouped
  std::vector<int32_t> tile_q;     // queries searched on the tile path
};

// A unit of parallel work: a group of tree queries sharing a start leaf, or a
// run of queries for the tile path.
struct WorkItem {
  int32_t cloud;
  int32_t leaf;  // -1: tile path
  int64_t first;
  int64_t count;
};

// Everything done for one cloud before the search: write its padding rows,
// split finite / non-finite points, pick the path, build the tree, lay out the
// query groups.  `parallel` lets the tree build and the home-leaf descent use
// threads (for a batch smaller than the thread count).  pr.D == D.
template <int D, typename A>
void prepare_lowd_cloud(const KnnProblem<A>& pr, int64_t b, bool parallel, LowDCloud<D, A>& c,
                        std::vector<WorkItem>& items) {
  const int64_t M = pr.M, N = pr.N, K = pr.K;
  const int64_t L = pr.pl[b];
  const int64_t Mq = pr.ql[b];
  write_padding_rows(pr, b);
  if (Mq == 0 || L == 0) return;
  const A* pb = pr.p + b * N * D;
  for (int64_t j = 0; j < L; ++j) {
    if (!cpu::all_finite<D, A>(pb + j * D)) c.nonfinite.push_back(static_cast<int32_t>(j));
  }
  const int64_t n_finite = L - static_cast<int64_t>(c.nonfinite.size());
  c.use_tree = plan(KnnPath::kTree, Mq, n_finite, D, K, pr.forced) == KnnPath::kTree;
  const int32_t cb = static_cast<int32_t>(b);
  if (c.use_tree) {
    KdBuilder<D, A> bl(&c.tree);
    bl.init(n_finite, cpu::kTreeLeafSize);
    int64_t pos = 0;
    size_t nf = 0;
    for (int64_t j = 0; j < L; ++j) {
      if (nf < c.nonfinite.size() && c.nonfinite[nf] == j) {
        ++nf;
        continue;
      }
      auto& rec = bl.rec(pos++);
      for (int d = 0; d < D; ++d) rec.c[d] = pb[j * D + d];
      rec.idx = static_cast<int32_t>(j);
    }
    // A large cloud: split its top serially, build the subtrees in parallel.
    const int64_t threads = parallel ? std::max<int64_t>(1, torch::stable::get_num_threads()) : 1;
    const int64_t cut = threads > 1 ? std::max<int64_t>(8192, n_finite / (4 * threads))
                                    : int64_t(1) << 40;
    std::vector<typename KdBuilder<D, A>::Task> tasks;
    bl.split_top(cut, &tasks);
    const int64_t nt = static_cast<int64_t>(tasks.size());
    if (nt > 1) {
      pcgeom::parallel_for(0, nt, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) bl.build_task(tasks[i]);
      });
    } else {
      for (const auto& t : tasks) bl.build_task(t);
    }
    bl.finish();
  }

  if (!c.use_tree) {
    for (int64_t m = 0; m < Mq; ++m) c.tile_q.push_back(static_cast<int32_t>(m));
  } else if (pr.self_query) {
    // A self query walks the tree's leaves: each leaf's points are one group,
    // and consecutive groups share nodes and points in cache.
    const KdTree<D, A>& t = c.tree;
    for (const int32_t leaf : t.leaves) {
      const int64_t first = static_cast<int64_t>(c.tree_q.size());
      for (int32_t pos = t.nodes[leaf].begin; pos < t.nodes[leaf].end; ++pos) {
        if (t.index[pos] < Mq) c.tree_q.push_back(t.index[pos]);
      }
      const int64_t cnt = static_cast<int64_t>(c.tree_q.size()) - first;
      if (cnt > 0) items.push_back({cb, leaf, first, cnt});
    }
    for (const int32_t j : c.nonfinite) {
      if (j < Mq) c.tile_q.push_back(j);
    }
    // Query rows past the points' length are not in the tree.
    for (int64_t m = L; m < Mq; ++m) c.tile_q.push_back(static_cast<int32_t>(m));
  } else {
    // Other queries are bucketed by the leaf a descent reaches (counting sort
    // by node id), so each group is spatially tight.
    const A* qb = pr.q + b * M * D;
    std::vector<int32_t> home(Mq, -1);
    auto descend = [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        if (cpu::all_finite<D, A>(qb + m * D)) home[m] = cpu::home_leaf<D, A>(c.tree, qb + m * D);
      }
    };
    if (parallel) {
      pcgeom::parallel_for(0, Mq, grain_for(64), descend);
    } else {
      descend(0, Mq);
    }
    const int64_t nn = static_cast<int64_t>(c.tree.nodes.size());
    std::vector<int32_t> start(nn + 1, 0);
    for (int64_t m = 0; m < Mq; ++m) {
      if (home[m] >= 0) {
        ++start[home[m] + 1];
      } else {
        c.tile_q.push_back(static_cast<int32_t>(m));
      }
    }
    for (int64_t i = 0; i < nn; ++i) start[i + 1] += start[i];
    c.tree_q.resize(start[nn]);
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int64_t m = 0; m < Mq; ++m) {
      if (home[m] >= 0) c.tree_q[fill[home[m]]++] = static_cast<int32_t>(m);
    }
    for (const int32_t leaf : c.tree.leaves) {
      for (int64_t s = start[leaf]; s < start[leaf + 1]; s += cpu::kMaxGroup) {
        items.push_back({cb, leaf, s, std::min<int64_t>(cpu::kMaxGroup, start[leaf + 1] - s)});
      }
    }
  }
  const int64_t chunk = std::max<int64_t>(1, grain_for(L * D) / 4);
  const int64_t ntile = static_cast<int64_t>(c.tile_q.size());
  for (int64_t s = 0; s < ntile; s += chunk) {
    items.push_back({cb, -1, s, std::min(chunk, ntile - s)});
  }
}

// The tree path for D = pr.D.
template <int D, typename A>
void knn_lowd(const KnnProblem<A>& pr) {
  using Key = typename FiniteKey<A>::type;
  const A *q = pr.q, *p = pr.p;
  const int64_t *ql = pr.ql, *pl = pr.pl;
  const int64_t B = pr.B, M = pr.M, N = pr.N, K = pr.K;
  const bool use_radius = pr.use_radius;
  const A r2 = pr.r2();
  std::vector<LowDCloud<D, A>> clouds(B);
  std::vector<std::vector<WorkItem>> items_per_cloud(B);

  // 1. Prepare: one parallel region over the clouds for a batch; for fewer
  //    clouds than threads, each cloud's build and descent use the threads.
  //    A light call runs inline: waking threads costs more than it saves.
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) work += (pl[b] + ql[b]) * (K + 8);
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  const bool light = work < 4 * kParallelWork;
  if (B >= threads || light) {
    pcgeom::parallel_for(0, B, light ? B : 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        prepare_lowd_cloud<D, A>(pr, b, false, clouds[b], items_per_cloud[b]);
      }
    });
  } else {
    for (int64_t b = 0; b < B; ++b) {
      prepare_lowd_cloud<D, A>(pr, b, true, clouds[b], items_per_cloud[b]);
    }
  }
  std::vector<WorkItem> items;
  for (auto& v : items_per_cloud) items.insert(items.end(), v.begin(), v.end());
  std::vector<std::vector<WorkItem>>().swap(items_per_cloud);

  // 2. Search.
  const int64_t tree_cost = 64 * (K + 16);
  const int64_t n_items = static_cast<int64_t>(items.size());
  pcgeom::parallel_for(
      0, n_items, light ? std::max<int64_t>(1, n_items) : grain_for(cpu::kMaxGroup * tree_cost),
      [&](int64_t begin, int64_t end) {
        cpu::GroupSearch<D, A> gs(K, use_radius, r2);
        std::vector<A> qa(cpu::kMaxGroup * D);
        // Sized on the first tree item: a call served by the tile path alone
        // (k up to N) must not hold kMaxGroup * k keys per thread.
        std::vector<Key> keys;
        std::vector<FiniteTopK<A>> tops;
        std::vector<A> bd;
        std::vector<int64_t> bi;
        for (int64_t w = begin; w < end; ++w) {
          const WorkItem& it = items[w];
          const int64_t b = it.cloud;
          const LowDCloud<D, A>& c = clouds[b];
          const A* pb = p + b * N * D;
          if (it.leaf < 0) {
            knn_tile_rows<A>(q + b * M * D, c.tile_q.data() + it.first, it.count, pb, pl[b], D,
                             K, use_radius, r2, pr.out_d + b * M * K, pr.out_i + b * M * K);
            continue;
          }
          if (bd.empty()) {
            bd.resize(K);
            bi.resize(K);
          }
          const int64_t g = it.count;
          const int32_t* qs = c.tree_q.data() + it.first;
          A glo[D], ghi[D];
          for (int64_t i = 0; i < g; ++i) {
            const A* src = q + (b * M + qs[i]) * D;
            for (int d = 0; d < D; ++d) {
              qa[i * D + d] = src[d];
              glo[d] = i == 0 || src[d] < glo[d] ? src[d] : glo[d];
              ghi[d] = i == 0 || src[d] > ghi[d] ? src[d] : ghi[d];
            }
          }
          // kKeySlack slots before the first list: the AVX2 insertion reads
          // up to four slots below a list's start (and rewrites them unchanged).
          constexpr int64_t kKeySlack = 4;
          if (keys.empty()) keys.resize(kKeySlack + cpu::kMaxGroup * K);
          tops.clear();
          for (int64_t i = 0; i < g; ++i) tops.emplace_back(keys.data() + kKeySlack + i * K, K);
          gs.run(c.tree, qa.data(), g, tops.data(), glo, ghi);
          for (int64_t i = 0; i < g; ++i) {
            FiniteTopK<A>& top = tops[i];
            top.finish();
            const int64_t r = b * M + qs[i];
            int64_t found = top.count;
            for (int64_t s = 0; s < found; ++s) {
              bd[s] = FiniteKey<A>::dist(top.keys[s]);
              bi[s] = FiniteKey<A>::idx(top.keys[s]);
            }
            if (!c.nonfinite.empty()) {
              // Top-k of a union = top-k of (the finite part's top-k, the rest).
              std::vector<A> fd(bd.begin(), bd.begin() + found);
              std::vector<int64_t> fi(bi.begin(), bi.begin() + found);
              found = with_topk<A>(bd.data(), bi.data(), K, [&](auto& t2) {
                for (size_t s = 0; s < fd.size(); ++s) t2.push(fd[s], fi[s]);
                for (const int32_t j : c.nonfinite) {
                  offer(t2, sq_dist<A, A>(qa.data() + i * D, pb + static_cast<int64_t>(j) * D, D),
                        j, use_radius, r2);
                }
              });
            }
            write_row<A, A>(bd.data(), bi.data(), found, K, pr.out_d + r * K, pr.out_i + r * K);
          }
        }
      });
}

}  // namespace

template <typename A>
void knn_lowd_cpu(const KnnProblem<A>& pr) {
  switch (pr.D) {
#define PCGEOM_LOWD_CASE(DD) \
  case DD:                   \
    knn_lowd<DD, A>(pr);     \
    return;
    PCGEOM_LOWD_CASE(1)
    PCGEOM_LOWD_CASE(2)
    PCGEOM_LOWD_CASE(3)
    PCGEOM_LOWD_CASE(4)
    PCGEOM_LOWD_CASE(5)
    PCGEOM_LOWD_CASE(6)
    PCGEOM_LOWD_CASE(7)
    PCGEOM_LOWD_CASE(8)
#undef PCGEOM_LOWD_CASE
    default:
      knn_tile_cpu<A>(pr);
  }
}

template void knn_lowd_cpu<float>(const KnnProblem<float>&);
template void knn_lowd_cpu<double>(const KnnProblem<double>&);

}  // namespace pcgeom
