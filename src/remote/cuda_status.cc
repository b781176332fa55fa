#include "remote/cuda_status.h"

namespace flyt::remote {
namespace {

enum Sticky : bool { kNo = false, kYes = true };

struct ErrorInfo {
  uint32_t value;
  std::string_view name;
  std::string_view description;
  bool sticky;
};

constexpr ErrorInfo kErrors[] = {
#define FLYT_CUDA_ERROR(name, value, sticky, text) {value, "cudaError" #name, text, sticky},
#include "cuda/cuda_errors.def"
#undef FLYT_CUDA_ERROR
};

const ErrorInfo* Find(uint32_t value) {
  for (const ErrorInfo& info : kErrors) {
    if (info.value == value) return &info;
  }
  return nullptr;
}

}  // namespace

std::string_view CudaErrorName(CudaError code) {
  if (code == CudaError::kSuccess) return "cudaSuccess";
  const ErrorInfo* info = Find(static_cast<uint32_t>(code));
  return info ? info->name : "cudaErrorUnknown";
}

std::string_view CudaErrorDescription(CudaError code) {
  const ErrorInfo* info = Find(static_cast<uint32_t>(code));
  return info ? info->description : "unrecognized error code";
}

bool IsStickyCudaError(CudaError code) {
  const ErrorInfo* info = Find(static_cast<uint32_t>(code));
  return info != nullptr && info->sticky;
}

bool IsKnownCudaError(uint32_t value) { return Find(value) != nullptr; }

std::string CudaStatus::ToString() const {
  std::string out(CudaErrorName(code_));
  out += " (";
  out += CudaErrorDescription(code_);
  out += ")";
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

}  // namespace flyt::remote
