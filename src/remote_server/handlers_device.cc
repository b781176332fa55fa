// ClientConnection's handlers of the device calls: properties and attributes, synchronize,
// reset, memory info, the no-op Sync, and the server's DebugStats (see connection.h).
// The runtime's side of the same calls: runtime/api_device.cc.
#include "remote_server/connection.h"

#include <algorithm>
#include <string>
#include <spdlog/spdlog.h>

namespace flyt::remote {

CudaResult<int32_t> ClientConnection::DeviceAttribute(uint32_t attr) const {
  // multiProcessorCount: the SMs this client's session runs with (a resize changes it at the
  // client's next call, whatever the backend's other clients run with).
  if (attr == 16 && sm_count_granted_ > 0) return sm_count_granted_;
  return backend_->DeviceAttribute(attr);
}

CudaResult<GetDevicePropertiesReply> ClientConnection::Handle(const GetDevicePropertiesRequest& r,
                                                               Io&) {
  if (r.device != 0) {
    return Error(CudaError::kInvalidDevice, "this server has one device, 0");
  }
  GetDevicePropertiesReply reply;
  DeviceIdentity identity = backend_->Identity();
  reply.name = identity.name;
  reply.uuid.assign(reinterpret_cast<const std::byte*>(identity.uuid.data()),
                    reinterpret_cast<const std::byte*>(identity.uuid.data()) + identity.uuid.size());
  uint64_t total = identity.total_memory_bytes;
  if (memory_.limit_bytes() != 0) total = std::min(total, memory_.limit_bytes());
  reply.values.push_back({"totalGlobalMem", static_cast<int64_t>(total)});
#define FLYT_DEVICE_PROP(field, attr, name)                                \
  if (CudaResult<int32_t> v = DeviceAttribute(attr); v.ok()) {        \
    reply.values.push_back({#field, ClientAttribute(attr, *v)});      \
    /* [issue 17: pools] ClientAttribute */                            \
  }
#include "remote/device_props.def"
#undef FLYT_DEVICE_PROP
  return reply;
}

CudaResult<DeviceGetAttributeReply> ClientConnection::Handle(const DeviceGetAttributeRequest& r,
                                                              Io&) {
  if (r.device != 0) return Error(CudaError::kInvalidDevice, "this server has one device, 0");
  FLYT_CUDA_ASSIGN_OR_RETURN(int32_t value, DeviceAttribute(r.attr));
  return DeviceGetAttributeReply{ClientAttribute(r.attr, value)};  // [issue 17: pools]
}

CudaResult<DeviceSynchronizeReply> ClientConnection::Handle(const DeviceSynchronizeRequest&, Io&) {
  FLYT_CUDA_RETURN_IF_ERROR(session_->DeviceSynchronize());
  return DeviceSynchronizeReply{};
}

CudaResult<DeviceResetReply> ClientConnection::Handle(const DeviceResetRequest&, Io& io) {
  // Async device-to-host copies still owed to the program: what finished is delivered, the rest
  // is abandoned, so that no landing is left waiting on the client's side.
  (void)session_->DeviceSynchronize();
  io.protocol = DeliverFinishedDownloads();
  for (const Download& d : downloads_) {
    if (!io.protocol.ok()) break;
    io.protocol = SendData(d.seq, d.call, kDataAbandoned, {});
  }
  if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
  FreeEverything();
  CudaStatus reset = session_->Reset();
  // A fault can leave the process unable to make a new context (the H100 does): with a process
  // per client, a fresh process goes on with the connection. Only when nothing of the client's
  // stream is buffered here unread (it would be lost with this process).
  if (!reset.ok() && IsStickyCudaError(reset.code()) &&
      server_.isolation() == Isolation::kProcess && channel_->buffered() == 0 &&
      !claimed_fd_.valid()) {
    Respawn(io.header.seq);
  }
  FLYT_CUDA_RETURN_IF_ERROR(reset);
  RegisterArena();  // a new context: the arena's registration went with the old one's objects
  return DeviceResetReply{};
}

CudaResult<MemGetInfoReply> ClientConnection::Handle(const MemGetInfoRequest&, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(MemoryInfo info, session_->MemGetInfo());
  uint64_t limit = memory_.limit_bytes();
  if (limit != 0) info.total_bytes = std::min(info.total_bytes, limit);
  // What every client of this server holds is not free, whether or not the backend sees it (a
  // client process's sim device knows only its own allocations; a GPU's count includes them).
  uint64_t used = memory_.used_bytes();
  info.free_bytes = std::min(info.free_bytes, used >= info.total_bytes ? 0 : info.total_bytes - used);
  return MemGetInfoReply{info.free_bytes, info.total_bytes};
}

CudaResult<SyncReply> ClientConnection::Handle(const SyncRequest&, Io&) { return SyncReply{}; }

CudaResult<DebugStatsReply> ClientConnection::Handle(const DebugStatsRequest&, Io&) {
  return server_.Stats();
}

CudaResult<ServerCountersReply> ClientConnection::Handle(const ServerCountersRequest&, Io&) {
  return ServerCountersReply{server_.registry_->CounterValues()};
}

}  // namespace flyt::remote
