#include "gpu/score.h"

#include <algorithm>

namespace flyt::gpu {

Status ScoreWeights::Validate() const {
  if (!(memory >= 0) || !(utilization >= 0)) {
    return InvalidArgument("score weights must be non-negative");
  }
  if (memory + utilization <= 0) return InvalidArgument("score weights must not both be zero");
  return Status::Ok();
}

std::optional<double> AvailabilityScore(const GpuInfo& gpu, const ScoreWeights& weights) {
  if (gpu.lost || !gpu.memory_total_bytes || !gpu.memory_free_bytes || !gpu.gpu_util_percent ||
      *gpu.memory_total_bytes == 0 || !weights.Validate().ok()) {
    return std::nullopt;
  }
  double sum = weights.memory + weights.utilization;
  double free_fraction = std::clamp(
      static_cast<double>(*gpu.memory_free_bytes) / static_cast<double>(*gpu.memory_total_bytes),
      0.0, 1.0);
  double idle_fraction = std::clamp((100.0 - *gpu.gpu_util_percent) / 100.0, 0.0, 1.0);
  return (weights.memory * free_fraction + weights.utilization * idle_fraction) / sum;
}

std::vector<ScoredGpu> RankAvailableGpus(const std::vector<GpuInfo>& gpus,
                                         uint64_t min_free_memory_bytes,
                                         uint32_t max_utilization_percent,
                                         const ScoreWeights& weights) {
  std::vector<ScoredGpu> ranked;
  for (const GpuInfo& gpu : gpus) {
    std::optional<double> score = AvailabilityScore(gpu, weights);
    if (!score) continue;
    if (*gpu.memory_free_bytes < min_free_memory_bytes) continue;
    if (*gpu.gpu_util_percent > max_utilization_percent) continue;
    ranked.push_back({gpu, *score});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const ScoredGpu& a, const ScoredGpu& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.gpu.index < b.gpu.index;
  });
  return ranked;
}

}  // namespace flyt::gpu
