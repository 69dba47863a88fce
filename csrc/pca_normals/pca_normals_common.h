// The math of pcgeom::pca_normals, shared by the CPU and CUDA kernels.
//
// One neighbourhood (a row of k neighbour indices into one cloud) becomes one
// unit normal and one surface variation ("curvature"):
//   * a neighbour counts when its index is in [0, N) and its three coordinates
//     are finite; -1 (knn's padding) and non-finite points are left out;
//   * the covariance is taken about the neighbours' mean, in the accumulation
//     type (float32 for float16/bfloat16/float32, float64 for float64), with
//     two exact power-of-two scalings so that nothing overflows or underflows
//     at any scale the input type holds (coordinates near 3e38 or subnormal):
//     the coordinates are scaled so that their largest magnitude lies in
//     [0.5, 1) before they are summed for the mean (a sum of k values near
//     the type's maximum overflows, a mean of subnormal ones is rounded to
//     the subnormal grid) unless it already lies in [2^-60, 2^60), where the
//     scale would change no bit, and the centred coordinates so that theirs
//     does before they are squared (1 / a subnormal spread overflows).
//     Eigenvectors and the ratio below do not depend on either scale, and a
//     power of two changes no rounding, so ordinary scales keep their bits;
//   * its eigen-decomposition is the cyclic Jacobi method on the 3x3 matrix
//     (rotations in the order (0,1), (0,2), (1,2); at most kMaxSweeps sweeps),
//     accurate to a few ulps of the largest eigenvalue even for planar and
//     repeated-eigenvalue neighbourhoods, where closed forms lose digits;
//   * normal = the unit eigenvector of the smallest eigenvalue, curvature =
//     lambda_min / (lambda_0 + lambda_1 + lambda_2) (eigenvalues clamped >= 0);
//   * degenerate neighbourhoods have fixed, finite answers:
//       - no valid neighbour, or all valid neighbours at one position
//         (exactly equal coordinates, detected as such, not from the rounded
//         mean): normal (0, 0, 1), curvature 0;
//       - collinear (lambda_mid <= 64 eps lambda_max): the unit vector
//         normalise(cross(line direction, e_a)), a = the axis least aligned
//         with the line (lowest such axis on ties), curvature as computed;
//   * sign: the component of largest magnitude is positive (on equal
//     magnitudes the lowest axis decides), judged on the normal as rounded to
//     the output dtype (float16/bfloat16 rounding can create the tie).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/checks.h"
#include "common/pcgeom_common.h"

namespace pcgeom {

constexpr int kPcaMaxSweeps = 32;

template <typename A>
PCGEOM_HD bool finite3(A x, A y, A z) {
  // x - x is 0 for finite x and NaN for +-inf and NaN.
  return (x - x) == A(0) && (y - y) == A(0) && (z - z) == A(0);
}

// Machine epsilon as a host-device constant (std::numeric_limits is host-only in CUDA).
template <typename A>
PCGEOM_HD A machine_eps();
template <>
PCGEOM_HD float machine_eps<float>() {
  return 1.1920928955078125e-07f;  // 2^-23
}
template <>
PCGEOM_HD double machine_eps<double>() {
  return 2.220446049250313080847e-16;  // 2^-52
}

template <typename A>
PCGEOM_HD A abs_(A v) {
  return v < A(0) ? -v : v;
}

// Multiplication by 2^e as two factors, each a power of two the type holds
// (2^148 is not a float, 2^1074 not a double; half of either is): x * a * b
// is exact unless the result is subnormal.  Built by doubling, because frexp
// and ldexp are not spelled alike in CUDA device code and on the host.
template <typename A>
PCGEOM_HD A pow2_in_range(int k) {  // 2^k for k within the type's normal exponents: at most 40 products
  const A up = A(4294967296.0);     // 2^32
  const A down = A(1) / up;
  A r = A(1);
  for (; k >= 32; k -= 32) r *= up;
  for (; k <= -32; k += 32) r *= down;
  for (; k > 0; --k) r *= A(2);
  for (; k < 0; ++k) r *= A(0.5);
  return r;
}

template <typename A>
struct Pow2 {
  A a, b;
  PCGEOM_HD explicit Pow2(int e) : a(pow2_in_range<A>(e / 2)), b(pow2_in_range<A>(e - e / 2)) {}
  PCGEOM_HD A operator()(A x) const { return b == A(1) ? x * a : x * a * b; }
};

// The binary exponent of a finite m > 0: m * 2^-e lies in [0.5, 1) (frexp's e).
template <typename A>
PCGEOM_HD int binary_exponent(A m) {
  const A big = A(4294967296.0);  // 2^32
  int e = 0;
  for (; m >= big; e += 32) m /= big;
  for (; m < A(1) / big; e -= 32) m *= big;
  for (; m >= A(1); ++e) m *= A(0.5);
  for (; m < A(0.5); --e) m *= A(2);
  return e;
}

// Symmetric 3x3 eigen-decomposition by cyclic Jacobi rotations.  On return
// a[i][i] are the eigenvalues and the columns v[.][i] their unit eigenvectors.
template <typename A>
PCGEOM_HD void jacobi3(A a[3][3], A v[3][3]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) v[i][j] = i == j ? A(1) : A(0);
  const int P[3] = {0, 0, 1}, Q[3] = {1, 2, 2}, R[3] = {2, 1, 0};
  for (int sweep = 0; sweep < kPcaMaxSweeps; ++sweep) {
    if (a[0][1] == A(0) && a[0][2] == A(0) && a[1][2] == A(0)) return;
    for (int r = 0; r < 3; ++r) {
      const int p = P[r], q = Q[r], o = R[r];
      const A apq = a[p][q];
      if (apq == A(0)) continue;
      const A app = a[p][p], aqq = a[q][q];
      const A g = A(100) * abs_(apq);
      if (sweep > 3 && abs_(app) + g == abs_(app) && abs_(aqq) + g == abs_(aqq)) {
        a[p][q] = a[q][p] = A(0);  // below the precision of the diagonal
        continue;
      }
      const A theta = (aqq - app) / (A(2) * apq);
      const A root = std::sqrt(theta * theta + A(1));
      // Large theta: theta^2 overflows, root = inf and t -> 0 (no rotation needed).
      A t = A(1) / (abs_(theta) + root);
      if (theta < A(0)) t = -t;
      const A c = A(1) / std::sqrt(t * t + A(1));
      const A s = t * c;
      a[p][p] = app - t * apq;
      a[q][q] = aqq + t * apq;
      a[p][q] = a[q][p] = A(0);
      const A aop = a[o][p], aoq = a[o][q];
      a[o][p] = a[p][o] = c * aop - s * aoq;
      a[o][q] = a[q][o] = s * aop + c * aoq;
      for (int i = 0; i < 3; ++i) {
        const A vip = v[i][p], viq = v[i][q];
        v[i][p] = c * vip - s * viq;
        v[i][q] = s * vip + c * viq;
      }
    }
  }
}

// Normal and curvature of the neighbourhood idx[0..K) of the cloud pb (N, 3).
template <typename T, typename A>
PCGEOM_HD void pca_normal_row(const T* pb, const int64_t* idx, int64_t K, int64_t N, T* normal,
                              T* curvature) {
  // The first valid neighbour, and whether every valid one sits exactly there:
  // the mean of n equal copies is not always that value (it is rounded), so
  // the centred copies can be a few ulps off zero, all equal -- a rank-one
  // "line" along (1, 1, 1) that the collinear rule would turn into a normal.
  // Detected exactly here instead, so one position always gives (0, 0, 1).
  A fx = A(0), fy = A(0), fz = A(0);
  A amax = A(0);  // the largest coordinate magnitude of the valid neighbours
  A rx = A(0), ry = A(0), rz = A(0);  // their sums, unscaled
  bool one_position = true;
  int64_t count = 0;
  for (int64_t s = 0; s < K; ++s) {
    const int64_t j = idx[s];
    if (j < 0 || j >= N) continue;
    const A x = static_cast<A>(pb[3 * j]), y = static_cast<A>(pb[3 * j + 1]),
            z = static_cast<A>(pb[3 * j + 2]);
    if (!finite3(x, y, z)) continue;
    if (count == 0) {
      fx = x;
      fy = y;
      fz = z;
    } else if (x != fx || y != fy || z != fz) {
      one_position = false;
    }
    amax = abs_(x) > amax ? abs_(x) : amax;
    amax = abs_(y) > amax ? abs_(y) : amax;
    amax = abs_(z) > amax ? abs_(z) : amax;
    rx += x;
    ry += y;
    rz += z;
    ++count;
  }
  A n[3] = {A(0), A(0), A(1)};
  A curv = A(0);
  // Two distinct finite positions: amax > 0.
  if (count > 0 && !one_position) {
    // Coordinates in [2^-60, 2^60) keep the unscaled sums: they cannot
    // overflow, nor the mean fall to subnormal rounding, and a power of two
    // would change no bit of what follows -- one pass saved on ordinary clouds.
    const bool moderate = amax >= A(8.673617379884035e-19) && amax < A(1152921504606846976.0);
    const Pow2<A> s1(moderate ? 0 : -binary_exponent(amax));  // coordinates * s1 lie in (-1, 1)
    A sx = rx, sy = ry, sz = rz;
    if (!moderate) {
      sx = sy = sz = A(0);
      for (int64_t s = 0; s < K; ++s) {
        const int64_t j = idx[s];
        if (j < 0 || j >= N) continue;
        const A x = static_cast<A>(pb[3 * j]), y = static_cast<A>(pb[3 * j + 1]),
                z = static_cast<A>(pb[3 * j + 2]);
        if (!finite3(x, y, z)) continue;
        sx += s1(x);
        sy += s1(y);
        sz += s1(z);
      }
    }
    const A inv = A(1) / static_cast<A>(count);
    const A mx = sx * inv, my = sy * inv, mz = sz * inv;
    A scale = A(0);
    for (int64_t s = 0; s < K; ++s) {
      const int64_t j = idx[s];
      if (j < 0 || j >= N) continue;
      const A x = static_cast<A>(pb[3 * j]), y = static_cast<A>(pb[3 * j + 1]),
              z = static_cast<A>(pb[3 * j + 2]);
      if (!finite3(x, y, z)) continue;
      const A dx = abs_(s1(x) - mx), dy = abs_(s1(y) - my),
              dz = abs_(s1(z) - mz);
      scale = dx > scale ? dx : scale;
      scale = dy > scale ? dy : scale;
      scale = dz > scale ? dz : scale;
    }
    if (scale > A(0)) {
      const Pow2<A> s2(-binary_exponent(scale));  // centred coordinates * s2 lie in (-1, 1)
      A cxx = A(0), cxy = A(0), cxz = A(0), cyy = A(0), cyz = A(0), czz = A(0);
      for (int64_t s = 0; s < K; ++s) {
        const int64_t j = idx[s];
        if (j < 0 || j >= N) continue;
        const A x = static_cast<A>(pb[3 * j]), y = static_cast<A>(pb[3 * j + 1]),
                z = static_cast<A>(pb[3 * j + 2]);
        if (!finite3(x, y, z)) continue;
        const A dx = s2(s1(x) - mx), dy = s2(s1(y) - my),
                dz = s2(s1(z) - mz);
        cxx += dx * dx;
        cxy += dx * dy;
        cxz += dx * dz;
        cyy += dy * dy;
        cyz += dy * dz;
        czz += dz * dz;
      }
      A a[3][3] = {{cxx * inv, cxy * inv, cxz * inv},
                   {cxy * inv, cyy * inv, cyz * inv},
                   {cxz * inv, cyz * inv, czz * inv}};
      A v[3][3];
      jacobi3(a, v);
      A lam[3] = {a[0][0], a[1][1], a[2][2]};
      for (int i = 0; i < 3; ++i) lam[i] = lam[i] > A(0) ? lam[i] : A(0);
      // Ascending order of the eigenvalues, ties by position (a stable sort of three).
      int o0 = 0, o1 = 1, o2 = 2, tmp;
      if (lam[o1] < lam[o0]) { tmp = o0; o0 = o1; o1 = tmp; }
      if (lam[o2] < lam[o1]) { tmp = o1; o1 = o2; o2 = tmp; }
      if (lam[o1] < lam[o0]) { tmp = o0; o0 = o1; o1 = tmp; }
      const A total = lam[0] + lam[1] + lam[2];
      if (lam[o2] > A(0)) {
        curv = lam[o0] / total;
        if (lam[o1] <= A(64) * machine_eps<A>() * lam[o2]) {
          // Collinear: perpendicular to the line, away from its dominant axes.
          const A d[3] = {v[0][o2], v[1][o2], v[2][o2]};
          int ax = 0;
          if (abs_(d[1]) < abs_(d[ax])) ax = 1;
          if (abs_(d[2]) < abs_(d[ax])) ax = 2;
          A e[3] = {A(0), A(0), A(0)};
          e[ax] = A(1);
          n[0] = d[1] * e[2] - d[2] * e[1];
          n[1] = d[2] * e[0] - d[0] * e[2];
          n[2] = d[0] * e[1] - d[1] * e[0];
        } else {
          n[0] = v[0][o0];
          n[1] = v[1][o0];
          n[2] = v[2][o0];
        }
        const A len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
        n[0] /= len;
        n[1] /= len;
        n[2] /= len;
      }
    }
  }
  // The sign rule is applied to the values as stored: float16/bfloat16 rounding
  // can make two components of different magnitude equal, and then the lowest
  // axis must be the positive one.  (For float32/float64 T is A and the
  // rounding is the identity; negation is exact in every type.)
  const A r[3] = {static_cast<A>(static_cast<T>(n[0])), static_cast<A>(static_cast<T>(n[1])),
                  static_cast<A>(static_cast<T>(n[2]))};
  int big = 0;
  if (abs_(r[1]) > abs_(r[big])) big = 1;
  if (abs_(r[2]) > abs_(r[big])) big = 2;
  const bool flip = r[big] < A(0);
  normal[0] = static_cast<T>(flip ? -r[0] : r[0]);
  normal[1] = static_cast<T>(flip ? -r[1] : r[1]);
  normal[2] = static_cast<T>(flip ? -r[2] : r[2]);
  *curvature = static_cast<T>(curv);
}

// The checks both devices open with (shapes, dtypes); device and index
// ranges are checked by each kernel where it can read them.
inline void check_pca_args(const torch::stable::Tensor& points, const torch::stable::Tensor& idx, const char* op) {
  check_rank(points, 3, op, "points", "(B, N, 3)");
  check_rank(idx, 3, op, "idx", "(B, M, k)");
  check_size(points, 2, 3, op, "points", "(B, N, 3)", "3-D coordinates");
  check_float_tensor(points, op, "points");
  check_int64(idx, op, "idx");
  check_size(idx, 0, points.size(0), op, "idx", "(B, M, k)", "the B of points");
}

}  // namespace pcgeom
