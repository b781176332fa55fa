#include "trace/raw_record.h"

#include <chrono>
#include <cstddef>
#include <cstring>

#include "trace/devices.h"
#include "trace/probes.h"

namespace flyt::trace {
namespace {

template <typename T>
bool Read(const void* data, size_t bytes, T* out) {
  if (bytes < sizeof(T)) return false;
  std::memcpy(out, data, sizeof(T));
  return true;
}

std::string Text(const char* text, size_t capacity) { return std::string(text, strnlen(text, capacity)); }

nlohmann::json Dims(const flyt_u32 (&d)[3]) { return nlohmann::json::array({d[0], d[1], d[2]}); }

}  // namespace

std::optional<std::string_view> EnvironText(const void* data, size_t bytes) {
  constexpr size_t kFixed = offsetof(flyt_trace_environ, text);
  flyt_trace_environ fixed;  // the header and the count only
  if (data == nullptr || bytes < kFixed) return std::nullopt;
  std::memcpy(&fixed, data, kFixed);
  if (fixed.bytes > FLYT_TRACE_ENVIRON_BYTES || fixed.bytes > bytes - kFixed) return std::nullopt;
  return std::string_view(static_cast<const char*>(data) + kFixed, fixed.bytes);
}

nlohmann::json RecordToJson(const void* data, size_t bytes) {
  flyt_trace_header h;
  if (!Read(data, bytes, &h)) return {{"kind", "short"}, {"malformed", true}};
  nlohmann::json j = {{"kind", KindName(h.kind)},
                      {"func", FuncName(h.func)},
                      {"library", LibraryClassName(h.library)},
                      {"pid", h.pid},
                      {"tid", h.tid},
                      {"rc", h.rc},
                      {"ts_ns", h.ts_ns},
                      {"entry_ns", h.entry_ns},
                      {"cgroup_id", h.cgroup_id},
                      {"flags", h.flags}};
  bool ok = true;
  switch (h.kind) {
    case FLYT_EV_LAUNCH: {
      flyt_trace_launch r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["function"] = r.function;
      j["stream"] = r.stream;
      j["grid"] = Dims(r.grid);
      j["block"] = Dims(r.block);
      j["shared_bytes"] = r.shared_bytes;
      break;
    }
    case FLYT_EV_ALLOC: {
      flyt_trace_alloc r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["ptr"] = r.ptr;
      j["bytes"] = r.bytes;
      j["stream"] = r.stream;
      j["memory"] = r.memory;
      break;
    }
    case FLYT_EV_FREE: {
      flyt_trace_free r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["ptr"] = r.ptr;
      j["stream"] = r.stream;
      j["memory"] = r.memory;
      break;
    }
    case FLYT_EV_COPY:
    case FLYT_EV_MEMSET: {
      flyt_trace_copy r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["dst"] = r.dst;
      j["src"] = r.src;
      j["bytes"] = r.bytes;
      j["stream"] = r.stream;
      j["copy_kind"] = r.copy_kind;
      j["async"] = r.async;
      break;
    }
    case FLYT_EV_SYNC: {
      flyt_trace_sync r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["object"] = r.object;
      break;
    }
    case FLYT_EV_EVENT_RECORD: {
      flyt_trace_event_record r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["event"] = r.event;
      j["stream"] = r.stream;
      break;
    }
    case FLYT_EV_STREAM_CREATE:
    case FLYT_EV_STREAM_DESTROY: {
      flyt_trace_stream r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["stream"] = r.stream;
      j["stream_flags"] = r.flags;
      j["priority"] = r.priority;
      break;
    }
    case FLYT_EV_SET_DEVICE: {
      flyt_trace_set_device r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["device"] = r.device;
      break;
    }
    case FLYT_EV_GET_KERNEL: {
      flyt_trace_get_kernel r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["handle"] = r.handle;
      j["stub"] = r.stub;
      break;
    }
    case FLYT_EV_REGISTER_FUNCTION:
    case FLYT_EV_MODULE_FUNCTION: {
      flyt_trace_name r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["address"] = r.address;
      j["name"] = Text(r.name, sizeof(r.name));
      break;
    }
    case FLYT_EV_SETENV: {
      flyt_trace_env r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["text"] = Text(r.text, sizeof(r.text));
      break;
    }
    case FLYT_EV_ENVIRON: {
      std::optional<std::string_view> text = EnvironText(data, bytes);
      if (!(ok = text.has_value())) break;
      j["bytes"] = text->size();
      const CudaEnv env = ParseEnviron(*text, (h.flags & FLYT_F_TRUNCATED) != 0);
      nlohmann::json vars = nlohmann::json::object();
      if (env.visible_devices) vars["CUDA_VISIBLE_DEVICES"] = *env.visible_devices;
      if (env.device_order) vars["CUDA_DEVICE_ORDER"] = *env.device_order;
      if (env.flyt_server) vars["FLYT_SERVER"] = *env.flyt_server;
      j["environment"] = std::move(vars);
      break;
    }
    case FLYT_EV_EXEC:
    case FLYT_EV_LIBRARY_OPEN: {
      flyt_trace_path r;
      if (!(ok = Read(data, bytes, &r))) break;
      j["path"] = Text(r.path, sizeof(r.path));
      break;
    }
    default:
      break;
  }
  if (!ok) j["malformed"] = true;
  return j;
}

void RawJsonSink::OnRecord(const void* data, size_t bytes) {
  std::string line = RecordToJson(data, bytes).dump(-1, ' ', false,
                                                    nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out_);
}

void RawJsonSink::OnAttachedLate(uint32_t pid, const std::string& library) {
  nlohmann::json j = {{"kind", "attached_late"}, {"pid", pid}, {"library", library}};
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), out_);
}

void RawJsonSink::OnDrainEnd() { std::fflush(out_); }

void ExitWatchingSink::OnRecord(const void* data, size_t bytes) {
  next_->OnRecord(data, bytes);
  flyt_trace_header h;
  if (!Read(data, bytes, &h) || h.kind != FLYT_EV_EXIT) return;
  MutexLock lock(mu_);
  exited_.insert(h.pid);
  cv_.NotifyAll();
}

bool ExitWatchingSink::WaitForExit(uint32_t pid, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  MutexLock lock(mu_);
  while (exited_.count(pid) == 0) {
    if (!cv_.WaitUntil(mu_, deadline)) return exited_.count(pid) != 0;
  }
  return true;
}

}  // namespace flyt::trace
