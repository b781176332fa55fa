#include "common/status.h"

#include <cstring>

namespace flyt {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kNotSupported:
      return "NOT_SUPPORTED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kTimeout:
      return "TIMEOUT";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  Status out(code_, std::move(message));
  out.reason_ = reason_;
  return out;
}

Status Status::WithReason(std::string reason) const {
  if (ok()) return *this;
  Status out = *this;
  out.reason_ = std::move(reason);
  return out;
}

Status ErrnoError(std::string_view context, int errnum) {
  char buf[256];
  // GNU strerror_r returns the message pointer, which may or may not be buf.
  const char* text = strerror_r(errnum, buf, sizeof(buf));
  std::string message(context);
  message += ": ";
  message += text;
  StatusCode code = StatusCode::kInternal;
  switch (errnum) {
    case ENOENT:
      code = StatusCode::kNotFound;
      break;
    case EINVAL:
      code = StatusCode::kInvalidArgument;
      break;
    case ETIMEDOUT:
      code = StatusCode::kTimeout;
      break;
    case EACCES:
    case EPERM:
      code = StatusCode::kFailedPrecondition;
      break;
    default:
      break;
  }
  return {code, std::move(message)};
}

}  // namespace flyt
