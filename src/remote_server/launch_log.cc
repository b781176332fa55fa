#include "remote_server/launch_log.h"

#include <unistd.h>

#include <cerrno>
#include <memory>
#include <nlohmann/json.hpp>

namespace flyt::remote {
namespace {

std::string Hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    auto v = static_cast<unsigned>(b);
    out.push_back(kDigits[v >> 4]);
    out.push_back(kDigits[v & 0xF]);
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<LaunchLog>> LaunchLog::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "ae");
  if (file == nullptr) return ErrnoError("open launch log " + path, errno);
  return std::unique_ptr<LaunchLog>(new LaunchLog(file));
}

LaunchLog::~LaunchLog() { std::fclose(file_); }

std::string LaunchLog::Format(const LaunchRecord& record) {
  nlohmann::ordered_json line;
  line["client"] = record.client_id;
  line["pid"] = record.pid;
  line["seq"] = record.seq;
  line["kernel"] = record.kernel;
  line["grid"] = {record.grid.x, record.grid.y, record.grid.z};
  line["block"] = {record.block.x, record.block.y, record.block.z};
  line["shared_bytes"] = record.shared_bytes;
  line["stream"] = record.stream;
  line["sm_count"] = record.sm_count;
  line["param_bytes"] = record.params.size();
  line["params"] = Hex(record.params);
  if (record.layout) {
    nlohmann::ordered_json args = nlohmann::ordered_json::array();
    for (const LaunchRecord::Arg& arg : *record.layout) {
      nlohmann::ordered_json a;
      a["offset"] = arg.offset;
      a["size"] = arg.size;
      if (static_cast<uint64_t>(arg.offset) + arg.size <= record.params.size()) {
        a["hex"] = Hex(record.params.subspan(arg.offset, arg.size));
      }
      args.push_back(std::move(a));
    }
    line["args"] = std::move(args);
  }
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void LaunchLog::Append(const LaunchRecord& record) {
  std::string text = Format(record);
  text.push_back('\n');
  // One write(2) per line on an O_APPEND file: lines from the client processes of one server
  // (each appending through the same open file) never interleave.
  MutexLock lock(mu_);
  const char* at = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(::fileno(file_), at, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk loses log lines, never the client's launch
    at += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace flyt::remote
