// High-dimensional exact KNN on the CPU: blocked GEMM candidate selection with
// exact re-ranking.
//
// For feature vectors (D = 16 ... 1024) the cost is the M x N x D distance
// work, which a GEMM does at the machine's peak.  So, per cloud:
//   1. centre the finite points (and queries) on the points' mean and take the
//      squared norms;
//   2. for tiles of queries x points, G = Qc Pc^T by aten::mm (BLAS) into a
//      fixed-size buffer, and v = |p|^2 - 2 q.p, which equals the squared
//      distance minus |q|^2 up to a rounding error bounded by
//      m_q = delta * (|q|^2 + max |p|^2), delta = (8D + 64) * unit roundoff;
//   3. keep, per query, every candidate with v <= V_k + 2 m_q, V_k being the
//      k-th smallest v seen so far.  A point dropped this way has an exact
//      distance *strictly* larger than that of k kept points, so it cannot be
//      in the answer, ties included;
//   4. re-rank the survivors with the exact distance formula of
//      pcgeom_common.h (coordinate order, float32 / float64 accumulation) and
//      the pcgeom key order.
// Self queries (the same tensor as query and points) compute only the upper
// triangle of tiles and feed each tile to both its rows and its columns, which
// halves the GEMM work.  Memory is fixed: one tile buffer plus the candidate
// lists, never an M x N matrix.
//
// Points with a NaN/inf coordinate are left out of the GEMM and merged in at
// the end (the top-k of a union is the top-k of the parts' top-k); queries with
// a NaN/inf coordinate, clouds whose norms could overflow, and clouds too small
// or with k too close to N for the filter to pay off are scanned directly.
#include "knn/knn_blocked_cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/pcgeom_common.h"
#include "common/topk_cpu.h"
#include "knn/knn_scan_cpu.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

constexpr int64_t kRowBlock = 256;
constexpr int64_t kColBlock = 1024;
constexpr int64_t kColTask = 64;

template <typename A>
struct Numeric;
template <>
struct Numeric<float> {
  static constexpr float unit = 5.9604644775390625e-08f;  // 2^-24
  static constexpr float tiny = 1e-30f;
  static constexpr float huge = 1e36f;
  static constexpr torch::headeronly::ScalarType dtype = torch::headeronly::ScalarType::Float;
};
template <>
struct Numeric<double> {
  static constexpr double unit = 1.1102230246251565e-16;  // 2^-53
  static constexpr double tiny = 1e-290;
  static constexpr double huge = 1e300;
  static constexpr torch::headeronly::ScalarType dtype = torch::headeronly::ScalarType::Double;
};

// out (m x n, contiguous) = a (m x D rows) . b (n x D rows)^T, through aten::mm.out.
template <typename A>
void gemm_nt(const A* a, int64_t m, const A* b, int64_t n, int64_t D, A* out) {
  const torch::stable::Device cpu(torch::headeronly::DeviceType::CPU);
  const auto st = Numeric<A>::dtype;
  Tensor ta = torch::stable::from_blob(const_cast<A*>(a), {m, D}, {D, 1}, cpu, st);
  Tensor tb = torch::stable::from_blob(const_cast<A*>(b), {D, n}, {1, D}, cpu, st);
  Tensor to = torch::stable::from_blob(out, {m, n}, {n, 1}, cpu, st);
  std::array<StableIValue, 3> stack{torch::stable::detail::from(ta),
                                    torch::stable::detail::from(tb),
                                    torch::stable::detail::from(to)};
  STABLE_TORCH_ERROR_CODE_CHECK(
      torch_call_dispatcher("aten::mm", "out", stack.data(), TORCH_ABI_VERSION));
  (void)torch::stable::detail::to<Tensor>(stack[0]);
}

// Candidates of one query: (v, position among the finite points).
template <typename A>
struct QueryState {
  std::vector<std::pair<A, int32_t>> cand;
  A tv;      // keep v <= tv
  A margin;  // m_q
  int64_t cap;

  void init(A qn, A pmax, A delta, int64_t K, bool use_radius, A r2) {
    cand.clear();
    margin = delta * (qn + pmax) + Numeric<A>::tiny;
    // Radius: exact <= r2 needs v <= r2 - |q|^2 + m (r2 padded for its own rounding).
    tv = use_radius ? (r2 + r2 * A(1.0 / 65536) + margin) - qn : pos_inf<A>();
    cap = std::max<int64_t>(2 * K + 32, 64);
    cand.reserve(cap);
  }

  void compact(int64_t K) {
    if (static_cast<int64_t>(cand.size()) >= K) {
      auto by_v = [](const std::pair<A, int32_t>& x, const std::pair<A, int32_t>& y) {
        return x.first < y.first;
      };
      std::nth_element(cand.begin(), cand.begin() + (K - 1), cand.end(), by_v);
      const A t = cand[K - 1].first + A(2) * margin;
      if (t < tv) tv = t;
      const A lim = tv;
      cand.erase(std::remove_if(cand.begin(), cand.end(),
                                [lim](const std::pair<A, int32_t>& x) { return x.first > lim; }),
                 cand.end());
    }
    // Many near-ties within the margin: grow instead of compacting every time.
    if (2 * static_cast<int64_t>(cand.size()) > cap) cap *= 2;
  }

  inline void add(A v, int32_t j, int64_t K) {
    cand.emplace_back(v, j);
    if (static_cast<int64_t>(cand.size()) >= cap) compact(K);
  }
};

// Exact squared distances of one query to rows `rows` of P (n x D), eight
// independent accumulation chains at a time (each in coordinate order).
template <typename A>
void exact_dists(const A* q, const A* P, int64_t D, const int32_t* rows, int64_t n, A* out) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const A* pr[8];
    for (int u = 0; u < 8; ++u) pr[u] = P + static_cast<int64_t>(rows[c + u]) * D;
    A acc[8] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
    for (int64_t d = 0; d < D; ++d) {
      const A qd = q[d];
      for (int u = 0; u < 8; ++u) {
        const A diff = qd - pr[u][d];
        acc[u] += diff * diff;
      }
    }
    for (int u = 0; u < 8; ++u) out[c + u] = acc[u];
  }
  for (; c < n; ++c) {
    const A* pr = P + static_cast<int64_t>(rows[c]) * D;
    A acc = A(0);
    for (int64_t d = 0; d < D; ++d) {
      const A diff = q[d] - pr[d];
      acc += diff * diff;
    }
    out[c] = acc;
  }
}

template <typename T>
struct Cloud {
  using A = acc_t<T>;
  std::vector<int32_t> fidx;       // original index of each finite point
  std::vector<int32_t> nonfinite;  // original indices of the other valid points
  std::vector<A> Pa;               // finite points, original coordinates (nF x D)
  std::vector<A> Pc;               // finite points, centred
  std::vector<A> pn;               // |Pc|^2
  std::vector<A> mu;               // centre
  A pmax = A(0);
  bool ok = true;                  // false: norms could overflow, scan instead
};

template <typename T>
void prepare_points(const T* pb, int64_t L, int64_t D, Cloud<T>* c) {
  using A = acc_t<T>;
  c->fidx.reserve(L);
  std::vector<double> sum(D, 0.0);
  for (int64_t j = 0; j < L; ++j) {
    bool fin = true;
    for (int64_t d = 0; d < D; ++d) fin = fin && std::isfinite(static_cast<A>(pb[j * D + d]));
    if (!fin) {
      c->nonfinite.push_back(static_cast<int32_t>(j));
      continue;
    }
    c->fidx.push_back(static_cast<int32_t>(j));
    for (int64_t d = 0; d < D; ++d) sum[d] += static_cast<double>(static_cast<A>(pb[j * D + d]));
  }
  const int64_t nF = static_cast<int64_t>(c->fidx.size());
  c->mu.assign(D, A(0));
  for (int64_t d = 0; d < D; ++d) c->mu[d] = nF ? static_cast<A>(sum[d] / nF) : A(0);
  c->Pa.resize(nF * D);
  c->Pc.resize(nF * D);
  c->pn.resize(nF);
  A pmax = A(0);
  for (int64_t r = 0; r < nF; ++r) {
    const T* src = pb + static_cast<int64_t>(c->fidx[r]) * D;
    A s = A(0);
    for (int64_t d = 0; d < D; ++d) {
      const A x = static_cast<A>(src[d]);
      const A y = x - c->mu[d];
      c->Pa[r * D + d] = x;
      c->Pc[r * D + d] = y;
      s += y * y;
    }
    c->pn[r] = s;
    pmax = s > pmax ? s : pmax;
  }
  c->pmax = pmax;
  c->ok = std::isfinite(pmax) && pmax < Numeric<A>::huge;
}

// Final answer of one query from its candidates (+ the non-finite points).
template <typename T>
void finalize(const Cloud<T>& c, const acc_t<T>* qa, const T* qt, const T* pb, int64_t D,
              int64_t K, QueryState<acc_t<T>>& st, bool use_radius, acc_t<T> r2,
              std::vector<int32_t>& rows, std::vector<acc_t<T>>& dd, acc_t<T>* bd, int64_t* bi,
              T* od, int64_t* oi) {
  using A = acc_t<T>;
  st.compact(K);
  const int64_t n = static_cast<int64_t>(st.cand.size());
  rows.resize(n);
  dd.resize(n);
  for (int64_t s = 0; s < n; ++s) rows[s] = st.cand[s].second;
  exact_dists<A>(qa, c.Pa.data(), D, rows.data(), n, dd.data());
  auto push_all = [&](auto& top) {
    for (int64_t s = 0; s < n; ++s) {
      cpu::offer(top, dd[s], static_cast<int64_t>(c.fidx[rows[s]]), use_radius, r2);
    }
    for (const int32_t j : c.nonfinite) {
      cpu::offer(top, sq_dist<T, A>(qt, pb + static_cast<int64_t>(j) * D, D), j, use_radius, r2);
    }
    top.finish();
    cpu::write_row<T, A>(bd, bi, top.count, K, od, oi);
  };
  if (K <= cpu::kSortedListMaxK) {
    cpu::SortedTopKList<A> top(bd, bi, K);
    push_all(top);
  } else {
    cpu::HeapTopK<A> top(bd, bi, K);
    push_all(top);
  }
}

// Direct scan of one cloud's queries (small clouds, k close to N, overflow).
template <typename T>
void scan_cloud(const T* qb, const T* pb, int64_t Lq, int64_t L, int64_t D, int64_t K,
                bool use_radius, acc_t<T> r2, T* od, int64_t* oi) {
  using A = acc_t<T>;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L * D));
  torch::stable::parallel_for(0, Lq, grain, [&](int64_t begin, int64_t end) {
    std::vector<A> bd(K);
    std::vector<int64_t> bi(K);
    for (int64_t m = begin; m < end; ++m) {
      auto run = [&](auto& top) {
        cpu::scan_rows<T, A>(qb + m * D, pb, L, D, top, use_radius, r2);
        top.finish();
        cpu::write_row<T, A>(bd.data(), bi.data(), top.count, K, od + m * K, oi + m * K);
      };
      if (K <= cpu::kSortedListMaxK) {
        cpu::SortedTopKList<A> top(bd.data(), bi.data(), K);
        run(top);
      } else {
        cpu::HeapTopK<A> top(bd.data(), bi.data(), K);
        run(top);
      }
    }
  });
}

// Scans one row of a tile for one query: candidates j0 + c for c in [0, n).
template <typename A>
inline void scan_tile_row(const A* g, const A* pn, int64_t n, int32_t j0, QueryState<A>& st,
                          int64_t K) {
  for (int64_t c = 0; c < n; ++c) {
    const A v = pn[c] - A(2) * g[c];
    if (v <= st.tv) st.add(v, j0 + static_cast<int32_t>(c), K);
  }
}

template <typename T>
void blocked_cloud(const T* qb, const T* pb, int64_t Lq, int64_t L, int64_t D, int64_t K,
                   bool use_radius, acc_t<T> r2, bool self_query, T* od, int64_t* oi) {
  using A = acc_t<T>;
  Cloud<T> c;
  prepare_points<T>(pb, L, D, &c);
  const int64_t nF = static_cast<int64_t>(c.fidx.size());
  if (!c.ok || nF < 64 || 4 * K > nF || Lq < 16) {
    scan_cloud<T>(qb, pb, Lq, L, D, K, use_radius, r2, od, oi);
    return;
  }
  const A delta = static_cast<A>(8 * D + 64) * Numeric<A>::unit;
  std::vector<A> G(kRowBlock * kColBlock);

  // Queries: finite rows, centred on the points' mean.  A self query with all
  // rows valid reuses the points' arrays.
  const bool symmetric = self_query && Lq == L;
  std::vector<int32_t> qrows;     // query row of each finite query
  std::vector<int32_t> qbad;      // non-finite query rows
  std::vector<A> Qc_store, qn_store, Qa_store;
  const A* Qc;
  const A* Qa;
  const A* qn;
  if (symmetric) {
    qrows = c.fidx;
    qbad = c.nonfinite;
    Qc = c.Pc.data();
    Qa = c.Pa.data();
    qn = c.pn.data();
  } else {
    qrows.reserve(Lq);
    for (int64_t m = 0; m < Lq; ++m) {
      bool fin = true;
      for (int64_t d = 0; d < D; ++d) fin = fin && std::isfinite(static_cast<A>(qb[m * D + d]));
      (fin ? qrows : qbad).push_back(static_cast<int32_t>(m));
    }
    const int64_t nQ = static_cast<int64_t>(qrows.size());
    Qc_store.resize(nQ * D);
    Qa_store.resize(nQ * D);
    qn_store.resize(nQ);
    A qmax = A(0);
    for (int64_t r = 0; r < nQ; ++r) {
      A s = A(0);
      for (int64_t d = 0; d < D; ++d) {
        const A x = static_cast<A>(qb[static_cast<int64_t>(qrows[r]) * D + d]);
        const A y = x - c.mu[d];
        Qa_store[r * D + d] = x;
        Qc_store[r * D + d] = y;
        s += y * y;
      }
      qn_store[r] = s;
      qmax = s > qmax ? s : qmax;
    }
    if (!(std::isfinite(qmax) && qmax < Numeric<A>::huge)) {
      scan_cloud<T>(qb, pb, Lq, L, D, K, use_radius, r2, od, oi);
      return;
    }
    Qc = Qc_store.data();
    Qa = Qa_store.data();
    qn = qn_store.data();
  }
  const int64_t nQ = static_cast<int64_t>(qrows.size());

  // Non-finite query rows: every distance is NaN/inf; scan.
  torch::stable::parallel_for(0, static_cast<int64_t>(qbad.size()), 1,
                              [&](int64_t begin, int64_t end) {
                                for (int64_t s = begin; s < end; ++s) {
                                  const int64_t m = qbad[s];
                                  scan_cloud<T>(qb + m * D, pb, 1, L, D, K, use_radius, r2,
                                                od + m * K, oi + m * K);
                                }
                              });

  auto finalize_range = [&](std::vector<QueryState<A>>& states, int64_t s0, int64_t n) {
    torch::stable::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> rows;
      std::vector<A> dd;
      std::vector<A> bd(K);
      std::vector<int64_t> bi(K);
      for (int64_t s = begin; s < end; ++s) {
        const int64_t r = s0 + s;
        const int64_t m = qrows[r];
        finalize<T>(c, Qa + r * D, qb + m * D, pb, D, K, states[s], use_radius, r2, rows, dd,
                    bd.data(), bi.data(), od + m * K, oi + m * K);
      }
    });
  };

  if (symmetric) {
    std::vector<QueryState<A>> states(nF);
    for (int64_t i = 0; i < nF; ++i) states[i].init(qn[i], c.pmax, delta, K, use_radius, r2);
    for (int64_t i0 = 0; i0 < nF; i0 += kRowBlock) {
      const int64_t ri = std::min(kRowBlock, nF - i0);
      for (int64_t c0 = i0; c0 < nF; c0 += kColBlock) {
        const int64_t cn = std::min(kColBlock, nF - c0);
        gemm_nt<A>(c.Pc.data() + i0 * D, ri, c.Pc.data() + c0 * D, cn, D, G.data());
        // Columns past the diagonal block also serve as queries (the tile's transpose).
        const int64_t cs = std::max(c0, i0 + ri);
        const int64_t ncol = c0 + cn > cs ? (c0 + cn - cs + kColTask - 1) / kColTask : 0;
        torch::stable::parallel_for(0, ri + ncol, 1, [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            if (t < ri) {
              scan_tile_row<A>(G.data() + t * cn, c.pn.data() + c0, cn,
                               static_cast<int32_t>(c0), states[i0 + t], K);
              continue;
            }
            const int64_t a = cs + (t - ri) * kColTask;
            const int64_t e = std::min(c0 + cn, a + kColTask);
            for (int64_t r = 0; r < ri; ++r) {
              const A pr = c.pn[i0 + r];
              const A* g = G.data() + r * cn - c0;
              for (int64_t j = a; j < e; ++j) {
                const A v = pr - A(2) * g[j];
                if (v <= states[j].tv) states[j].add(v, static_cast<int32_t>(i0 + r), K);
              }
            }
          }
        });
      }
    }
    finalize_range(states, 0, nF);
    return;
  }

  std::vector<QueryState<A>> states(kRowBlock);
  for (int64_t i0 = 0; i0 < nQ; i0 += kRowBlock) {
    const int64_t ri = std::min(kRowBlock, nQ - i0);
    for (int64_t r = 0; r < ri; ++r) states[r].init(qn[i0 + r], c.pmax, delta, K, use_radius, r2);
    for (int64_t c0 = 0; c0 < nF; c0 += kColBlock) {
      const int64_t cn = std::min(kColBlock, nF - c0);
      gemm_nt<A>(Qc + i0 * D, ri, c.Pc.data() + c0 * D, cn, D, G.data());
      torch::stable::parallel_for(0, ri, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          scan_tile_row<A>(G.data() + t * cn, c.pn.data() + c0, cn, static_cast<int32_t>(c0),
                           states[t], K);
        }
      });
    }
    finalize_range(states, i0, ri);
  }
}

}  // namespace

template <typename T>
void knn_blocked_cpu(const T* q, const T* p, const int64_t* ql, const int64_t* pl, int64_t B,
                     int64_t M, int64_t N, int64_t D, int64_t K, bool use_radius, double radius2,
                     bool self_query, T* out_d, int64_t* out_i) {
  using A = acc_t<T>;
  const A r2 = static_cast<A>(radius2);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Lq = ql[b];
    T* od = out_d + b * M * K;
    int64_t* oi = out_i + b * M * K;
    if (pl[b] > 0 && Lq > 0) {
      blocked_cloud<T>(q + b * M * D, p + b * N * D, Lq, pl[b], D, K, use_radius, r2, self_query,
                       od, oi);
    }
    const int64_t from = pl[b] > 0 ? Lq : 0;
    for (int64_t m = from; m < M; ++m) cpu::write_padding<T, A>(K, od + m * K, oi + m * K);
  }
}

template void knn_blocked_cpu<float>(const float*, const float*, const int64_t*, const int64_t*,
                                     int64_t, int64_t, int64_t, int64_t, int64_t, bool, double,
                                     bool, float*, int64_t*);
template void knn_blocked_cpu<double>(const double*, const double*, const int64_t*,
                                      const int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                      bool, double, bool, double*, int64_t*);
}  // namespace pcgeom
