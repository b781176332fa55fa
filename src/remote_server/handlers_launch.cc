// ClientConnection's handlers of the module, function and launch calls (see connection.h).
// The runtime's side of the same calls: runtime/api_launch.cc.
#include "remote_server/connection.h"

#include <algorithm>
#include <string>
#include <spdlog/spdlog.h>

#include "cuda/image.h"

namespace flyt::remote {

CudaResult<ModuleLoadReply> ClientConnection::Handle(const ModuleLoadRequest& r, Io& io) {
  if (r.bytes == 0 || r.bytes > kMaxModuleBytes) {
    return DrainData(io, std::min(r.bytes, kMaxModuleBytes),
                     Error(CudaError::kInvalidKernelImage,
                           "module image of " + std::to_string(r.bytes) + " bytes"));
  }
  if (r.module == 0 || modules_.Find(r.module)) {
    return DrainData(io, r.bytes,
                     InsertError(r.module == 0 ? HandleInsert::kZero : HandleInsert::kTaken,
                                 "module", r.module));
  }
  Bytes image;
  image.reserve(r.bytes);
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveData(io, r.bytes, [&](uint64_t, std::span<const std::byte> c) {
    image.insert(image.end(), c.begin(), c.end());
    return CudaStatus::Ok();
  }));
  FLYT_CUDA_ASSIGN_OR_RETURN(ModuleHandle handle, session_->ModuleLoad(image));
  Module module{handle, r.label.substr(0, 200), {}, {}};
  if (server_.launch_log_) {
    // Argument layouts for the launch log; a module flyt cannot parse still loads.
    Result<std::vector<cuda::KernelInfo>> kernels = cuda::KernelsOfImage(image);
    if (kernels.ok()) {
      for (const cuda::KernelInfo& k : *kernels) {
        std::vector<LaunchRecord::Arg> args;
        for (const cuda::KernelParam& p : k.params) args.push_back({p.offset, p.size_bytes});
        module.layouts.emplace(k.name, std::move(args));
      }
    }
  }
  module.image = std::move(image);
  if (CudaStatus s = InsertError(modules_.Insert(r.module, std::move(module)), "module", r.module);
      !s.ok()) {
    (void)session_->ModuleUnload(handle);
    return s;
  }
  counters_->modules += 1;
  return ModuleLoadReply{};
}

CudaResult<ModuleUnloadReply> ClientConnection::Handle(const ModuleUnloadRequest& r, Io&) {
  std::optional<Module> module = modules_.Erase(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  counters_->modules -= 1;
  functions_.EraseIf([&](uint64_t, const Function& f) { return f.module == r.module; });
  std::vector<uint64_t> gone;
  globals_.ForEach([&](uint64_t base, uint64_t, const Global& g) {
    if (g.module == r.module) gone.push_back(base);
  });
  for (uint64_t base : gone) globals_.Remove(base);
  std::erase_if(global_cache_, [&](const auto& entry) { return entry.first.first == r.module; });
  FLYT_CUDA_RETURN_IF_ERROR(session_->ModuleUnload(module->handle));
  return ModuleUnloadReply{};
}

CudaResult<ModuleGetFunctionReply> ClientConnection::Handle(const ModuleGetFunctionRequest& r,
                                                            Io&) {
  const Module* module = modules_.Find(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  if (r.function == 0 || functions_.Find(r.function)) {
    return InsertError(r.function == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "function",
                       r.function);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(FunctionHandle handle,
                             session_->ModuleGetFunction(module->handle, r.name));
  FLYT_CUDA_RETURN_IF_ERROR(InsertError(
      functions_.Insert(r.function, Function{handle, r.module, r.name, {}}), "function", r.function));
  return ModuleGetFunctionReply{};
}

CudaResult<ModuleGetGlobalReply> ClientConnection::Handle(const ModuleGetGlobalRequest& r, Io&) {
  const Module* module = modules_.Find(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  auto key = std::make_pair(r.module, r.name);
  if (auto it = global_cache_.find(key); it != global_cache_.end()) {
    return ModuleGetGlobalReply{it->second.ptr, it->second.bytes};
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(GlobalSymbol global,
                             session_->ModuleGetGlobal(module->handle, r.name, r.registered_bytes));
  if (r.registered_bytes != 0 && global.bytes != r.registered_bytes) {
    spdlog::debug("{}: global {} is {} bytes on the device, {} registered", Tag(), r.name,
                  global.bytes, r.registered_bytes);
  }
  if (global.bytes != 0 && !globals_.Add(global.ptr, global.bytes, Global{r.module})) {
    return Error(CudaError::kUnknown, "backend returned a global that overlaps another range");
  }
  global_cache_.emplace(key, global);
  return ModuleGetGlobalReply{global.ptr, global.bytes};
}

CudaResult<FuncGetAttributesReply> ClientConnection::Handle(const FuncGetAttributesRequest& r,
                                                            Io&) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FuncGetAttributesReply reply;
  for (uint32_t attr = 0; attr < kFunctionAttributeCount; ++attr) {
    CudaResult<int32_t> value =
        session_->FuncGetAttribute(function->handle, static_cast<FunctionAttribute>(attr));
    if (value.ok()) {
      reply.values.push_back({attr, *value});
    } else if (attr == 0) {
      return value.status();
    }
  }
  return reply;
}

CudaResult<FuncSetAttributeReply> ClientConnection::Handle(const FuncSetAttributeRequest& r, Io&) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  if (r.attr >= kFunctionAttributeCount) {
    return Error(CudaError::kInvalidValue, "unknown function attribute " + std::to_string(r.attr));
  }
  FLYT_CUDA_RETURN_IF_ERROR(session_->FuncSetAttribute(
      function->handle, static_cast<FunctionAttribute>(r.attr), r.value));
  functions_.Find(r.function)->attributes[r.attr] = r.value;
  return FuncSetAttributeReply{};
}

CudaResult<OccupancyMaxActiveBlocksReply> ClientConnection::Handle(
    const OccupancyMaxActiveBlocksRequest& r, Io&) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(int32_t blocks,
                             session_->OccupancyMaxActiveBlocksPerSm(
                                 function->handle, r.block_size, r.dynamic_shared_bytes, r.flags));
  return OccupancyMaxActiveBlocksReply{blocks};
}

CudaResult<LaunchKernelReply> ClientConnection::Handle(const LaunchKernelRequest& r, Io& io) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.grid.x == 0 || r.grid.y == 0 || r.grid.z == 0 || r.block.x == 0 || r.block.y == 0 ||
      r.block.z == 0) {
    return Error(CudaError::kInvalidConfiguration, "zero grid or block dimension");
  }
  LaunchConfig config{r.grid, r.block, r.shared_bytes, stream};
  FLYT_CUDA_RETURN_IF_ERROR(session_->LaunchKernel(function->handle, config, r.params));
  counters_->launches += 1;
  if (server_.launch_log_) {
    LogLaunch(io.header.seq, *function, r.grid, r.block, r.shared_bytes, r.stream, r.params);
  }
  return LaunchKernelReply{};
}

void ClientConnection::LogLaunch(uint32_t seq, const Function& function, const Dim3& grid,
                                 const Dim3& block, uint32_t shared_bytes, uint64_t stream,
                                 std::span<const std::byte> params) const {
  LaunchRecord record;
  record.client_id = id_;
  record.pid = pid_;
  record.seq = seq;
  record.kernel = function.name;
  record.grid = grid;
  record.block = block;
  record.shared_bytes = shared_bytes;
  record.stream = stream;
  record.sm_count = static_cast<uint32_t>(std::max(sm_count_granted_, 0));
  record.params = params;
  if (const Module* module = modules_.Find(function.module)) {
    if (auto it = module->layouts.find(function.name); it != module->layouts.end()) {
      record.layout = it->second;
    }
  }
  server_.launch_log_->Append(record);
}

}  // namespace flyt::remote
