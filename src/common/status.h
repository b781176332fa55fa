// Status and Result<T>: how every fallible function in flyt reports failure.
//
// A Status is either OK or an error code with a human-readable message, plus an optional reason: a
// short snake_case word that a program can act on ("insufficient_gpus", "already_ended") where the
// code alone is too coarse. The HTTP layer sends it as the error body's "code". Result<T> holds either a
// value or a non-OK Status. Both are cheap to move and are plain values: they own no resources and
// may be passed between threads freely. Errors from outside sources become a Status in one helper
// per source (ErrnoError here, NvmlError in nvml/), so the wording of a message is decided once.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace flyt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong (bad config, malformed file, unknown index)
  kNotFound,         // the thing asked for does not exist
  kNotSupported,     // the hardware or library cannot do it
  kUnavailable,      // a dependency (library, tool, device) is missing or gone; may come back
  kTimeout,
  kFailedPrecondition,
  kResourceExhausted,
  kAlreadyExists,  // a create or claim collides with something that exists
  kPermissionDenied,  // the caller is known but may not do this
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: gpu 9 does not exist" style text, for logs and CLI output.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>" (the reason is kept).
  Status WithContext(std::string_view context) const;

  // The machine-readable reason, empty when none was given (see the file comment).
  const std::string& reason() const { return reason_; }
  // Returns a copy that carries `reason` (an OK status stays OK and carries none).
  Status WithReason(std::string reason) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string reason_;
};

inline Status InvalidArgument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status NotFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
inline Status NotSupported(std::string message) {
  return {StatusCode::kNotSupported, std::move(message)};
}
inline Status Unavailable(std::string message) {
  return {StatusCode::kUnavailable, std::move(message)};
}
inline Status AlreadyExists(std::string message) {
  return {StatusCode::kAlreadyExists, std::move(message)};
}
inline Status PermissionDenied(std::string message) {
  return {StatusCode::kPermissionDenied, std::move(message)};
}
inline Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

// The Status for a failed system call: "<context>: <strerror(errnum)>".
Status ErrnoError(std::string_view context, int errnum);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status has no value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace flyt

#define FLYT_CONCAT_INNER(a, b) a##b
#define FLYT_CONCAT(a, b) FLYT_CONCAT_INNER(a, b)

// Returns the Status of an expression from the enclosing function when it is not OK.
// (Each expansion names its temporary uniquely, so the macro may nest, e.g. inside a lambda.)
#define FLYT_RETURN_IF_ERROR(expr) \
  FLYT_RETURN_IF_ERROR_IMPL(FLYT_CONCAT(flyt_status__, __COUNTER__), expr)
#define FLYT_RETURN_IF_ERROR_IMPL(tmp, expr) \
  do {                                       \
    ::flyt::Status tmp = (expr);             \
    if (!tmp.ok()) return tmp;               \
  } while (0)

// Declares `lhs` from a Result expression, or returns its Status from the enclosing function.
#define FLYT_ASSIGN_OR_RETURN(lhs, expr) \
  FLYT_ASSIGN_OR_RETURN_IMPL(FLYT_CONCAT(flyt_result__, __COUNTER__), lhs, expr)
#define FLYT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
