// Host entry points of the CPU KNN search, shared by knn and ball_query.
#pragma once

#include <tuple>

#include <torch/csrc/stable/tensor.h>

namespace pcgeom {

// Exact KNN (optionally restricted to dist2 <= radius2) over padded batches.
// query (B,M,D), points (B,N,D), lengths int64 (B,).  Returns (dist2 (B,M,k)
// in the input dtype, idx (B,M,k) int64) with the padding documented in
// pcgeom.knn.
std::tuple<torch::stable::Tensor, torch::stable::Tensor> knn_search_cpu(
    const torch::stable::Tensor& query, const torch::stable::Tensor& points, int64_t k,
    const torch::stable::Tensor& query_lengths, const torch::stable::Tensor& points_lengths,
    bool use_radius, double radius2, const char* op);

// Gradient of dist2 = |q - p[idx]|^2 w.r.t. query and points; shared by knn and ball_query.
std::tuple<torch::stable::Tensor, torch::stable::Tensor> knn_backward_cpu(
    torch::stable::Tensor grad_dist2, torch::stable::Tensor query, torch::stable::Tensor points,
    torch::stable::Tensor idx);

}  // namespace pcgeom
