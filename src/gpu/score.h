// The availability score and the ranking of GPUs that a job may use.
//
// score = w_mem · free/total + w_util · (100 − util)/100, weights normalised to sum to 1 (default
// 0.6 / 0.4), so a score is in [0, 1] and higher is better. A GPU whose free memory or
// utilisation is unknown, or which is lost, has no score and is never offered: availability
// fails closed. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "gpu/types.h"

namespace flyt::gpu {

struct ScoreWeights {
  double memory = 0.6;
  double utilization = 0.4;
  // Both non-negative and not both zero.
  Status Validate() const;
};

std::optional<double> AvailabilityScore(const GpuInfo& gpu, const ScoreWeights& weights = {});

struct ScoredGpu {
  GpuInfo gpu;
  double score = 0;
};

// GPUs with at least `min_free_memory_bytes` free and at most `max_utilization_percent` busy,
// best score first (ties: lower index first).
std::vector<ScoredGpu> RankAvailableGpus(const std::vector<GpuInfo>& gpus,
                                         uint64_t min_free_memory_bytes,
                                         uint32_t max_utilization_percent,
                                         const ScoreWeights& weights = {});

}  // namespace flyt::gpu
