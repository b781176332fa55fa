// PLACEHOLDER until the cycle test lands: says "not implemented" for every series.
#include "profile/cycle.h"

namespace flyt::profile {

CycleResult DetectCycle(std::span<const double> values, double dt_s, const CycleOptions& options) {
  (void)values;
  (void)dt_s;
  (void)options;
  CycleResult r;
  r.insufficient = true;
  r.reason = "cycle test not implemented";
  return r;
}

std::optional<Phase> FoldPhase(std::span<const double> values, double dt_s, double period_s) {
  (void)values;
  (void)dt_s;
  (void)period_s;
  return std::nullopt;
}

}  // namespace flyt::profile
