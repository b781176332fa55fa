// libcuda.so.1: streams and events (each call in its legacy and per-thread-default-stream form).
#include <cuda.h>

#include "libcuda/driver.h"

using flyt::libcuda::Driver;
using flyt::libcuda::EventRecord;
using flyt::libcuda::Guard;
using flyt::libcuda::StreamRecord;
using flyt::remote::CudaStatus;

namespace {

// The connection after the context check every stream and event call makes.
CUresult Connect(Driver& d, flyt::remote::Connection** conn) {
  if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
  auto c = d.Connection();
  if (!c.ok()) return d.Finish(c.status());
  *conn = *c;
  return CUDA_SUCCESS;
}

CUresult CreateStream(CUstream* stream, unsigned flags, int priority) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::Get();
  flyt::remote::Connection* conn = nullptr;
  if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
  priority = std::clamp(priority, -5, 0);  // the device's range; CUDA clamps too
  const uint64_t id = d.NewId();
  if (CUresult r = d.Finish(conn->StreamCreate({id, flags, priority})); r != CUDA_SUCCESS) return r;
  *stream = d.AddStream(StreamRecord{id, flags, priority, d.Current()});
  return CUDA_SUCCESS;
}

CUresult StreamCall(CUstream stream, bool per_thread, bool query) {
  Driver& d = Driver::Get();
  flyt::remote::Connection* conn = nullptr;
  if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
  auto id = d.ResolveStream(stream, per_thread);
  if (!id.ok()) return d.Finish(id.status());
  if (query) return d.Finish(conn->StreamQuery({*id}).status());
  return d.Finish(conn->StreamSynchronize({*id}).status());
}

CUresult WaitEvent(CUstream stream, CUevent event, unsigned flags, bool per_thread) {
  Driver& d = Driver::Get();
  flyt::remote::Connection* conn = nullptr;
  if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
  auto id = d.ResolveStream(stream, per_thread);
  if (!id.ok()) return d.Finish(id.status());
  std::optional<EventRecord> e = d.FindEvent(event);
  if (!e) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuStreamWaitEvent: not an event");
  return d.Finish(conn->StreamWaitEvent({*id, e->id, flags}));
}

CUresult StreamFlags(CUstream stream, unsigned* flags, int* priority) {
  Driver& d = Driver::Get();
  if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    if (flags != nullptr) *flags = 0;
    if (priority != nullptr) *priority = 0;
    return CUDA_SUCCESS;
  }
  std::optional<StreamRecord> s = d.FindStream(stream);
  if (!s) return d.Local(CUDA_ERROR_INVALID_HANDLE, "not a stream of this process");
  if (flags != nullptr) *flags = s->flags;
  if (priority != nullptr) *priority = s->priority;
  return CUDA_SUCCESS;
}

CUresult RecordEvent(CUevent event, CUstream stream, bool per_thread) {
  Driver& d = Driver::Get();
  flyt::remote::Connection* conn = nullptr;
  if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
  std::optional<EventRecord> e = d.FindEvent(event);
  if (!e) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord: not an event");
  auto id = d.ResolveStream(stream, per_thread);
  if (!id.ok()) return d.Finish(id.status());
  return d.Finish(conn->EventRecord({e->id, *id}));
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  return Guard("cuStreamCreate", [&] { return CreateStream(stream, flags, 0); });
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return Guard("cuStreamCreateWithPriority", [&] { return CreateStream(stream, flags, priority); });
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream stream) {
  return Guard("cuStreamDestroy_v2", [&] {
    Driver& d = Driver::Get();
    flyt::remote::Connection* conn = nullptr;
    if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
    std::optional<StreamRecord> s = d.RemoveStream(stream);
    if (!s) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy: not a stream");
    return d.Finish(conn->StreamDestroy({s->id}));
  });
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  return Guard("cuStreamSynchronize", [&] { return StreamCall(stream, false, false); });
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream stream) {
  return Guard("cuStreamSynchronize_ptsz", [&] { return StreamCall(stream, true, false); });
}
CUresult CUDAAPI cuStreamQuery(CUstream stream) {
  return Guard("cuStreamQuery", [&] { return StreamCall(stream, false, true); });
}
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream stream) {
  return Guard("cuStreamQuery_ptsz", [&] { return StreamCall(stream, true, true); });
}
CUresult CUDAAPI cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  return Guard("cuStreamWaitEvent", [&] { return WaitEvent(stream, event, flags, false); });
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags) {
  return Guard("cuStreamWaitEvent_ptsz", [&] { return WaitEvent(stream, event, flags, true); });
}
CUresult CUDAAPI cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  return Guard("cuStreamGetFlags", [&] {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return StreamFlags(stream, flags, nullptr);
  });
}
CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream stream, unsigned int* flags) {
  return cuStreamGetFlags(stream, flags);
}
CUresult CUDAAPI cuStreamGetPriority(CUstream stream, int* priority) {
  return Guard("cuStreamGetPriority", [&] {
    if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return StreamFlags(stream, nullptr, priority);
  });
}
CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream stream, int* priority) {
  return cuStreamGetPriority(stream, priority);
}
CUresult CUDAAPI cuStreamGetCtx(CUstream stream, CUcontext* context) {
  return Guard("cuStreamGetCtx", [&] {
    if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    flyt::libcuda::ContextRecord* owner = d.Current();
    if (stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) {
      std::optional<StreamRecord> s = d.FindStream(stream);
      if (!s) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuStreamGetCtx: not a stream");
      if (s->context != nullptr) owner = s->context;
    }
    *context = reinterpret_cast<CUcontext>(owner);
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream stream, CUcontext* context) {
  return cuStreamGetCtx(stream, context);
}

// ---- events ------------------------------------------------------------------------------------

CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int flags) {
  return Guard("cuEventCreate", [&] {
    if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & ~(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) !=
        0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Driver& d = Driver::Get();
    flyt::remote::Connection* conn = nullptr;
    if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
    const uint64_t id = d.NewId();
    if (CUresult r = d.Finish(conn->EventCreate({id, flags})); r != CUDA_SUCCESS) return r;
    *event = d.AddEvent(EventRecord{id, flags});
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent event) {
  return Guard("cuEventDestroy_v2", [&] {
    Driver& d = Driver::Get();
    flyt::remote::Connection* conn = nullptr;
    if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
    std::optional<EventRecord> e = d.RemoveEvent(event);
    if (!e) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy: not an event");
    return d.Finish(conn->EventDestroy({e->id}));
  });
}

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  return Guard("cuEventRecord", [&] { return RecordEvent(event, stream, false); });
}
CUresult CUDAAPI cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return Guard("cuEventRecord_ptsz", [&] { return RecordEvent(event, stream, true); });
}
CUresult CUDAAPI cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  return Guard("cuEventRecordWithFlags", [&] {
    if ((flags & ~CU_EVENT_RECORD_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;
    return RecordEvent(event, stream, false);
  });
}
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream, unsigned int flags) {
  return Guard("cuEventRecordWithFlags_ptsz", [&] {
    if ((flags & ~CU_EVENT_RECORD_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;
    return RecordEvent(event, stream, true);
  });
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  return Guard("cuEventSynchronize", [&] {
    Driver& d = Driver::Get();
    flyt::remote::Connection* conn = nullptr;
    if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
    std::optional<EventRecord> e = d.FindEvent(event);
    if (!e) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize: not an event");
    return d.Finish(conn->EventSynchronize({e->id}).status());
  });
}

CUresult CUDAAPI cuEventQuery(CUevent event) {
  return Guard("cuEventQuery", [&] {
    Driver& d = Driver::Get();
    flyt::remote::Connection* conn = nullptr;
    if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
    std::optional<EventRecord> e = d.FindEvent(event);
    if (!e) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuEventQuery: not an event");
    return d.Finish(conn->EventQuery({e->id}).status());
  });
}

CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return Guard("cuEventElapsedTime_v2", [&] {
    if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    flyt::remote::Connection* conn = nullptr;
    if (CUresult r = Connect(d, &conn); r != CUDA_SUCCESS) return r;
    std::optional<EventRecord> a = d.FindEvent(start), b = d.FindEvent(end);
    if (!a || !b) return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: not an event");
    auto reply = conn->EventElapsedTime({a->id, b->id});
    if (!reply.ok()) return d.Finish(reply.status());
    *ms = reply->ms;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

}  // extern "C"
