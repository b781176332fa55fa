#include "node/cuda_json.h"

#include "common/strings.h"
#include "gpu/json.h"

namespace flyt::node {
namespace {

using nlohmann::json;

json Triple(const uint32_t (&v)[3]) { return json::array({v[0], v[1], v[2]}); }

json CopiesJson(const trace::CopyBytes& c) {
  return {{"host_to_device", c.host_to_device},
          {"device_to_host", c.device_to_host},
          {"device_to_device", c.device_to_device},
          {"host_to_host", c.host_to_host},
          {"memset", c.memset},
          {"copies", c.copies},
          {"memsets", c.memsets}};
}

// Names come from programs (comm, demangled kernels): never let invalid UTF-8 break a body.
std::string Text(const std::string& s) { return SanitizeUtf8(s); }

}  // namespace

json ToJson(const trace::ProcessCuda& p) {
  json kernels = json::array();
  for (const trace::KernelStats& k : p.top_kernels) {
    json shapes = json::array();
    for (const trace::LaunchShape& s : k.shapes) {
      shapes.push_back({{"grid", Triple(s.grid)},
                        {"block", Triple(s.block)},
                        {"shared_bytes", s.shared_bytes},
                        {"launches", s.launches}});
    }
    kernels.push_back({{"name", Text(k.name)},
                       {"launches", k.launches},
                       {"shapes", shapes},
                       {"other_shapes", k.other_shapes}});
  }
  json streams = json::array();
  for (const trace::StreamStats& s : p.streams) {
    streams.push_back({{"handle", s.handle},
                       {"non_blocking", s.non_blocking},
                       {"per_thread", s.per_thread},
                       {"thread", s.thread},
                       {"launches", s.launches},
                       {"copies", CopiesJson(s.copies)},
                       {"syncs", s.syncs},
                       {"busy_seconds", s.busy_seconds}});
  }
  json failures = json::object();
  for (const auto& [name, n] : p.failures) failures[Text(name)] = n;
  return {{"pid", p.pid},
          {"comm", Text(p.comm)},
          {"gpu_uuid", p.gpu_uuid},
          {"device", p.device},
          {"remote", p.remote},
          {"remote_server", Text(p.remote_server)},
          {"cgroup_id", p.cgroup_id},
          {"container_id", p.container_id},
          {"library", Text(p.library)},
          {"attached_late", p.attached_late},
          {"first_seen", gpu::FormatTime(p.first_seen)},
          {"last_seen", gpu::FormatTime(p.last_seen)},
          {"launches", p.launches},
          {"launches_per_second", p.launches_per_second},
          {"busy_seconds", p.busy_seconds},
          {"core_usage", p.core_usage},
          {"syncs", p.syncs},
          {"device_memory_bytes", p.device_memory_bytes},
          {"device_memory_peak_bytes", p.device_memory_peak_bytes},
          {"managed_memory_bytes", p.managed_memory_bytes},
          {"pinned_host_bytes", p.pinned_host_bytes},
          {"pinned_host_peak_bytes", p.pinned_host_peak_bytes},
          {"allocations", p.allocations},
          {"frees", p.frees},
          {"copies", CopiesJson(p.copies)},
          {"failures", failures},
          {"top_kernels", kernels},
          {"streams", streams},
          {"exited", p.exited},
          {"exit_code", p.exit_code ? json(*p.exit_code) : json(nullptr)},
          {"leaked_bytes", p.leaked_bytes},
          {"leaked_allocations", p.leaked_allocations},
          {"leaked_pinned_host_bytes", p.leaked_pinned_host_bytes}};
}

json ToJson(const trace::TracerHealth& h) {
  json failures = json::object();
  for (const auto& [reason, n] : h.attach_failures) failures[Text(reason)] = n;
  json unprobeable = json::array();
  for (const trace::UnprobeableProcess& u : h.unprobeable) {
    unprobeable.push_back(
        {{"pid", u.pid}, {"executable", Text(u.executable)}, {"reason", Text(u.reason)}});
  }
  json libraries = json::array();
  for (const std::string& l : h.libraries) libraries.push_back(Text(l));
  return {{"enabled", h.enabled},
          {"disabled_reason", Text(h.disabled_reason)},
          {"events_received", h.events_received},
          {"events_lost", h.events_lost},
          {"attach_failures", failures},
          {"libraries_probed", h.libraries_probed},
          {"processes_traced", h.processes_traced},
          {"processes_tracked", h.processes_tracked},
          {"dropped_processes", h.dropped_processes},
          {"dropped_streams", h.dropped_streams},
          {"dropped_allocations", h.dropped_allocations},
          {"unprobeable", unprobeable},
          {"libraries", libraries}};
}

json CudaSummaryJson(const trace::ProcessCuda& p) {
  return {{"pid", p.pid},
          {"comm", Text(p.comm)},
          {"gpu_uuid", p.gpu_uuid},
          {"remote", p.remote},
          {"launches", p.launches},
          {"launches_per_second", p.launches_per_second},
          {"device_memory_bytes", p.device_memory_bytes},
          {"device_memory_peak_bytes", p.device_memory_peak_bytes},
          {"leaked_bytes", p.leaked_bytes},
          {"busy_seconds", p.busy_seconds},
          {"core_usage", p.core_usage},
          {"exited", p.exited}};
}

}  // namespace flyt::node
