// Host entry point of the CUDA KNN search, shared by knn and ball_query.
#pragma once

#include <tuple>

#include <torch/csrc/stable/tensor.h>

namespace pcgeom {
namespace cuda {

// Exact KNN (optionally restricted to dist2 <= radius2) over padded batches on
// the GPU: same contract and same answers as pcgeom::knn_search_cpu.
std::tuple<torch::stable::Tensor, torch::stable::Tensor> knn_search_cuda(
    const torch::stable::Tensor& query, const torch::stable::Tensor& points, int64_t k,
    const torch::stable::Tensor& query_lengths, const torch::stable::Tensor& points_lengths,
    bool use_radius, double radius2, const char* op);

}  // namespace cuda
}  // namespace pcgeom
