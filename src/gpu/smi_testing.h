// Helpers shared by the nvidia-smi fallback's tests (smi_parse_test.cc, smi_backend_test.cc):
// the recorded outputs under tests/data/nvidia-smi and the field list. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "gpu/smi_backend.h"

namespace flyt::gpu::smi_test {

inline constexpr uint64_t kMiB = 1048576;

inline std::string DataDir() { return std::string(FLYT_SOURCE_DIR) + "/tests/data/nvidia-smi/"; }

inline std::string ReadData(const std::string& relative) {
  Result<std::string> text = ReadFile(DataDir() + relative);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

inline std::vector<std::string> FieldsWithout(const std::string& dropped) {
  std::vector<std::string> fields;
  for (const std::string& f : SmiGpuFields()) {
    if (f != dropped) fields.push_back(f);
  }
  return fields;
}

}  // namespace flyt::gpu::smi_test
