// Streams and events. cudaStream_t / cudaEvent_t values are pointers to records in the runtime
// (never dereferenced: looked up), numbered for the server by this process; creating, recording
// and waiting are posted, synchronising and querying wait for the server.
#include <algorithm>

#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

// The record behind a stream as the program passed it; the default streams have flags 0,
// priority 0.
CudaResult<StreamRecord> StreamInfo(cudaStream_t stream, bool per_thread) {
  Runtime& rt = Runtime::Get();
  auto value = reinterpret_cast<uintptr_t>(stream);
  if (value <= 2) {
    FLYT_CUDA_ASSIGN_OR_RETURN(uint64_t id, rt.ResolveStream(stream, per_thread));
    return StreamRecord{id, 0, 0, rt.generation()};
  }
  return rt.FindStream(stream);
}

cudaError_t CreateStream(cudaStream_t* stream, unsigned flags, int priority) {
  Runtime& rt = Runtime::Get();
  if (stream == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null pStream"));
  if ((flags & ~unsigned{cudaStreamNonBlocking}) != 0) {
    return rt.Finish(Error(CudaError::kInvalidValue, "unknown stream flags"));
  }
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  auto conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  priority = std::clamp(priority, -5, 0);  // cudaDeviceGetStreamPriorityRange
  uint64_t id = rt.NewId();
  CudaStatus posted = (*conn)->StreamCreate({id, flags, priority});
  if (!posted.ok()) return rt.Finish(posted);
  *stream = rt.AddStream({id, flags, priority, rt.generation()});
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t StreamCall(const char* name, cudaStream_t stream, bool per_thread, bool query) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto id = rt.ResolveStream(stream, per_thread);
    if (!id.ok()) return rt.Finish(id.status());
    if (auto r = rt.CaptureSync(*id)) return rt.Finish(*r);  // [issue 17: graphs]
    if (query) return rt.FinishSync((*conn)->StreamQuery({*id}).status());
    return rt.FinishSync((*conn)->StreamSynchronize({*id}).status());
  });
}

// cudaEventSynchronize / cudaEventQuery (query): a synchronising call on one event.
cudaError_t EventCall(const char* name, cudaEvent_t event, bool query) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto e = rt.FindEvent(event);
    if (!e.ok()) return rt.Finish(e.status());
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    if (query) return rt.FinishSync((*conn)->EventQuery({e->id}).status());
    return rt.FinishSync((*conn)->EventSynchronize({e->id}).status());
  });
}

cudaError_t WaitEvent(const char* name, cudaStream_t stream, cudaEvent_t event, unsigned flags,
                      bool per_thread) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto id = rt.ResolveStream(stream, per_thread);
    if (!id.ok()) return rt.Finish(id.status());
    auto e = rt.FindEvent(event);
    if (!e.ok()) return rt.Finish(e.status());
    if (auto r = rt.CaptureWait(*id, e->id)) return rt.Finish(*r);  // [issue 17: graphs]
    return rt.Finish((*conn)->StreamWaitEvent({*id, e->id, flags}));
  });
}

cudaError_t Record(const char* name, cudaEvent_t event, cudaStream_t stream, unsigned flags,
                   bool per_thread) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    if ((flags & ~unsigned{cudaEventRecordExternal}) != 0) {
      return rt.Finish(Error(CudaError::kInvalidValue, "unknown event record flags"));
    }
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto e = rt.FindEvent(event);
    if (!e.ok()) return rt.Finish(e.status());
    auto id = rt.ResolveStream(stream, per_thread);
    if (!id.ok()) return rt.Finish(id.status());
    if (auto r = rt.CaptureRecord(e->id, *id)) return rt.Finish(*r);  // [issue 17: graphs]
    return rt.Finish((*conn)->EventRecord({e->id, *id}));
  });
}

template <typename Fn>
cudaError_t StreamFact(const char* name, cudaStream_t stream, bool per_thread, Fn&& fn) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    auto info = StreamInfo(stream, per_thread);
    if (!info.ok()) return rt.Finish(info.status());
    return fn(*info);
  });
}

}  // namespace
}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
using flyt::runtime::StreamRecord;
namespace rt_impl = flyt::runtime;

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) noexcept {
  return Guard("cudaStreamCreate", [&] { return rt_impl::CreateStream(pStream, 0, 0); });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) noexcept {
  return Guard("cudaStreamCreateWithFlags",
               [&] { return rt_impl::CreateStream(pStream, flags, 0); });
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                         int priority) noexcept {
  return Guard("cudaStreamCreateWithPriority",
               [&] { return rt_impl::CreateStream(pStream, flags, priority); });
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) noexcept {
  return Guard("cudaStreamDestroy", [&] {
    Runtime& rt = Runtime::Get();
    std::optional<StreamRecord> record = rt.RemoveStream(stream);
    if (!record) {
      return rt.Finish(CudaStatus(CudaError::kInvalidResourceHandle, "not a stream to destroy"));
    }
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.Finish((*conn)->StreamDestroy({record->id}));
  });
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) noexcept {
  return rt_impl::StreamCall("cudaStreamSynchronize", stream, false, false);
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) noexcept {
  return rt_impl::StreamCall("cudaStreamSynchronize_ptsz", stream, true, false);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) noexcept {
  return rt_impl::StreamCall("cudaStreamQuery", stream, false, true);
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) noexcept {
  return rt_impl::StreamCall("cudaStreamQuery_ptsz", stream, true, true);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags) noexcept {
  return rt_impl::WaitEvent("cudaStreamWaitEvent", stream, event, flags, false);
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                     unsigned int flags) noexcept {
  return rt_impl::WaitEvent("cudaStreamWaitEvent_ptsz", stream, event, flags, true);
}

#define FLYT_STREAM_FACT(name, per_thread, type, out, expr)                              \
  cudaError_t name(cudaStream_t hStream, type out) noexcept {                           \
    return rt_impl::StreamFact(#name, hStream, per_thread, [&]([[maybe_unused]] const StreamRecord& s) { \
      if (out == nullptr) return cudaErrorInvalidValue;                                 \
      *out = (expr);                                                                     \
      return cudaSuccess;                                                                \
    });                                                                                  \
  }
FLYT_STREAM_FACT(cudaStreamGetFlags, false, unsigned int*, flags, s.flags)
FLYT_STREAM_FACT(cudaStreamGetFlags_ptsz, true, unsigned int*, flags, s.flags)
FLYT_STREAM_FACT(cudaStreamGetPriority, false, int*, priority, s.priority)
FLYT_STREAM_FACT(cudaStreamGetPriority_ptsz, true, int*, priority, s.priority)
FLYT_STREAM_FACT(cudaStreamGetDevice, false, int*, device, 0)
FLYT_STREAM_FACT(cudaStreamGetDevice_ptsz, true, int*, device, 0)
FLYT_STREAM_FACT(cudaStreamGetId, false, unsigned long long*, streamId, s.id)  // NOLINT
FLYT_STREAM_FACT(cudaStreamGetId_ptsz, true, unsigned long long*, streamId, s.id)  // NOLINT
// [issue 17: graphs] cudaStreamIsCapturing(_ptsz): api_graphs.cc
#undef FLYT_STREAM_FACT

// [issue 17: graphs] cudaThreadExchangeStreamCaptureMode: api_graphs.cc

cudaError_t cudaEventCreate(cudaEvent_t* event) noexcept {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) noexcept {
  return Guard("cudaEventCreateWithFlags", [&] {
    Runtime& rt = Runtime::Get();
    constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming |
                                cudaEventInterprocess;
    if (event == nullptr || (flags & ~kKnown) != 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "bad event pointer or flags"));
    }
    if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) {
      return rt.Finish(
          CudaStatus(CudaError::kInvalidValue, "an interprocess event must disable timing"));
    }
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    uint64_t id = rt.NewId();
    CudaStatus posted = (*conn)->EventCreate({id, flags});
    if (!posted.ok()) return rt.Finish(posted);
    *event = rt.AddEvent({id, flags, rt.generation()});
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) noexcept {
  return rt_impl::Record("cudaEventRecord", event, stream, 0, false);
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) noexcept {
  return rt_impl::Record("cudaEventRecord_ptsz", event, stream, 0, true);
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                     unsigned int flags) noexcept {
  return rt_impl::Record("cudaEventRecordWithFlags", event, stream, flags, false);
}
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                          unsigned int flags) noexcept {
  return rt_impl::Record("cudaEventRecordWithFlags_ptsz", event, stream, flags, true);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) noexcept {
  return rt_impl::EventCall("cudaEventSynchronize", event, false);
}

cudaError_t cudaEventQuery(cudaEvent_t event) noexcept {
  return rt_impl::EventCall("cudaEventQuery", event, true);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) noexcept {
  return Guard("cudaEventElapsedTime", [&] {
    Runtime& rt = Runtime::Get();
    if (ms == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null ms"));
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto a = rt.FindEvent(start);
    if (!a.ok()) return rt.Finish(a.status());
    auto b = rt.FindEvent(end);
    if (!b.ok()) return rt.Finish(b.status());
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto reply = (*conn)->EventElapsedTime({a->id, b->id});
    if (!reply.ok()) return rt.Finish(reply.status());
    *ms = reply->ms;
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaEventDestroy(cudaEvent_t event) noexcept {
  return Guard("cudaEventDestroy", [&] {
    Runtime& rt = Runtime::Get();
    auto record = rt.RemoveEvent(event);
    if (!record) {
      return rt.Finish(CudaStatus(CudaError::kInvalidResourceHandle, "not an event to destroy"));
    }
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.Finish((*conn)->EventDestroy({record->id}));
  });
}

}  // extern "C"
