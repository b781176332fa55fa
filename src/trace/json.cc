#include "trace/json.h"

#include "gpu/json.h"

namespace flyt::trace {

using nlohmann::json;

namespace {

json Triple(const uint32_t v[3]) { return json::array({v[0], v[1], v[2]}); }

json ToJson(const LaunchShape& s) {
  return {{"grid", Triple(s.grid)},
          {"block", Triple(s.block)},
          {"shared_bytes", s.shared_bytes},
          {"launches", s.launches}};
}

json Counts(const std::map<std::string, uint64_t>& counts) {
  json out = json::object();
  for (const auto& [name, n] : counts) out[name] = n;
  return out;
}

}  // namespace

json ToJson(const CopyBytes& c) {
  return {{"host_to_device", c.host_to_device},
          {"device_to_host", c.device_to_host},
          {"device_to_device", c.device_to_device},
          {"host_to_host", c.host_to_host},
          {"memset", c.memset},
          {"copies", c.copies},
          {"memsets", c.memsets}};
}

json ToJson(const KernelStats& k) {
  json shapes = json::array();
  for (const LaunchShape& s : k.shapes) shapes.push_back(ToJson(s));
  return {{"name", k.name},
          {"launches", k.launches},
          {"shapes", std::move(shapes)},
          {"other_shapes", k.other_shapes}};
}

json ToJson(const StreamStats& s) {
  return {{"handle", s.handle},
          {"non_blocking", s.non_blocking},
          {"per_thread", s.per_thread},
          {"thread", s.thread},
          {"destroyed", s.destroyed},
          {"launches", s.launches},
          {"copies", ToJson(s.copies)},
          {"syncs", s.syncs},
          {"busy_seconds", s.busy_seconds}};
}

json ToJson(const ProcessCuda& p) {
  json kernels = json::array();
  for (const KernelStats& k : p.top_kernels) kernels.push_back(ToJson(k));
  json streams = json::array();
  for (const StreamStats& s : p.streams) streams.push_back(ToJson(s));
  json j = {{"pid", p.pid},
            {"comm", p.comm},
            {"gpu_uuid", p.gpu_uuid},
            {"mig_uuid", p.mig_uuid},
            {"nvml_mismatch", p.nvml_mismatch},
            {"gpu_from_nvml", p.gpu_from_nvml},
            {"device", p.device},
            {"remote", p.remote},
            {"remote_server", p.remote_server},
            {"cgroup_id", p.cgroup_id},
            {"container_id", p.container_id},
            {"library", p.library},
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
            {"unknown_frees", p.unknown_frees},
            {"copies", ToJson(p.copies)},
            {"failures", Counts(p.failures)},
            {"top_kernels", std::move(kernels)},
            {"streams", std::move(streams)},
            {"exited", p.exited},
            {"exit_code", nullptr},
            {"leaked_bytes", p.leaked_bytes},
            {"leaked_allocations", p.leaked_allocations},
            {"leaked_pinned_host_bytes", p.leaked_pinned_host_bytes}};
  if (p.exit_code.has_value()) j["exit_code"] = *p.exit_code;
  return j;
}

json ToJson(const TracerHealth& h) {
  json unprobeable = json::array();
  for (const UnprobeableProcess& u : h.unprobeable) {
    unprobeable.push_back({{"pid", u.pid}, {"executable", u.executable}, {"reason", u.reason}});
  }
  return {{"enabled", h.enabled},
          {"disabled_reason", h.disabled_reason},
          {"events_received", h.events_received},
          {"events_lost", h.events_lost},
          {"attach_failures", Counts(h.attach_failures)},
          {"libraries_probed", h.libraries_probed},
          {"processes_traced", h.processes_traced},
          {"processes_tracked", h.processes_tracked},
          {"dropped_processes", h.dropped_processes},
          {"dropped_streams", h.dropped_streams},
          {"dropped_allocations", h.dropped_allocations},
          {"dropped_kernel_names", h.dropped_kernel_names},
          {"malformed_records", h.malformed_records},
          {"nvml_mismatches", h.nvml_mismatches},
          {"unprobeable", std::move(unprobeable)},
          {"libraries", h.libraries}};
}

json SummaryToJson(const ProcessCuda& p) {
  return {{"pid", p.pid},
          {"comm", p.comm},
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

}  // namespace flyt::trace
