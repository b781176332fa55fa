// CudaError, CudaStatus and CudaResult<T>: how remote CUDA reports the outcome of a device
// operation, in CUDA's own terms.
//
// flyt's Status says what went wrong for people; a CUDA program needs the exact cudaError_t its
// API promises (cudaErrorMemoryAllocation, cudaErrorInvalidResourceHandle, ...). A CudaStatus
// carries that code plus a message for logs; the code list is cuda_errors.def, expanded here into
// the enum, the names ("cudaErrorInvalidValue"), the descriptions ("invalid argument") and the
// sticky flag. Plain values: they own nothing and may be passed between threads freely.
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace flyt::remote {

enum class CudaError : uint32_t {
#define FLYT_CUDA_ERROR(name, value, sticky, text) k##name = value,
#include "cuda/cuda_errors.def"
#undef FLYT_CUDA_ERROR
};

// "cudaErrorInvalidValue"; "cudaErrorUnknown" for a number not in the list.
std::string_view CudaErrorName(CudaError code);
// "invalid argument"; "unrecognized error code" for a number not in the list.
std::string_view CudaErrorDescription(CudaError code);
// Whether the error corrupts the context, so that every later call reports it too.
bool IsStickyCudaError(CudaError code);
// Whether `value` is one of the listed codes (a number from the wire may not be).
bool IsKnownCudaError(uint32_t value);

class [[nodiscard]] CudaStatus {
 public:
  CudaStatus() = default;
  CudaStatus(CudaError code, std::string message) : code_(code), message_(std::move(message)) {}

  static CudaStatus Ok() { return {}; }

  bool ok() const { return code_ == CudaError::kSuccess; }
  CudaError code() const { return code_; }
  const std::string& message() const { return message_; }

  // "cudaErrorInvalidValue (invalid argument): <message>", for logs.
  std::string ToString() const;

 private:
  CudaError code_ = CudaError::kSuccess;
  std::string message_;
};

template <typename T>
class [[nodiscard]] CudaResult {
 public:
  CudaResult(T value) : v_(std::move(value)) {}              // NOLINT(google-explicit-constructor)
  CudaResult(CudaStatus status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<CudaStatus>(v_).ok() && "CudaResult built from a success status");
  }
  CudaResult(CudaError code, std::string message) : CudaResult(CudaStatus(code, std::move(message))) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  const CudaStatus& status() const {
    static const CudaStatus kOk;
    return ok() ? kOk : std::get<CudaStatus>(v_);
  }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, CudaStatus> v_;
};

}  // namespace flyt::remote

// Returns a non-success CudaStatus from the enclosing function.
#define FLYT_CUDA_RETURN_IF_ERROR(expr) \
  FLYT_CUDA_RETURN_IF_ERROR_IMPL(FLYT_CONCAT(flyt_cuda_status__, __COUNTER__), expr)
#define FLYT_CUDA_RETURN_IF_ERROR_IMPL(tmp, expr) \
  do {                                            \
    ::flyt::remote::CudaStatus tmp = (expr);      \
    if (!tmp.ok()) return tmp;                    \
  } while (0)

// Declares `lhs` from a CudaResult expression, or returns its CudaStatus.
#define FLYT_CUDA_ASSIGN_OR_RETURN(lhs, expr) \
  FLYT_CUDA_ASSIGN_OR_RETURN_IMPL(FLYT_CONCAT(flyt_cuda_result__, __COUNTER__), lhs, expr)
#define FLYT_CUDA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

#ifndef FLYT_CONCAT
#define FLYT_CONCAT_INNER(a, b) a##b
#define FLYT_CONCAT(a, b) FLYT_CONCAT_INNER(a, b)
#endif
