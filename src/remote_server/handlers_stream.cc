// ClientConnection's handlers of the stream and event calls (see connection.h).
// The runtime's side of the same calls: runtime/api_stream.cc.
#include "remote_server/connection.h"

#include <algorithm>
#include <string>

namespace flyt::remote {

CudaResult<StreamCreateReply> ClientConnection::Handle(const StreamCreateRequest& r, Io&) {
  if ((r.flags & ~kStreamNonBlocking) != 0) {
    return Error(CudaError::kInvalidValue, "unknown stream flags " + Hex(r.flags));
  }
  if (r.stream == 0 || streams_.Find(r.stream)) {
    return InsertError(r.stream == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "stream",
                       r.stream);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle handle, session_->StreamCreate(r.flags, r.priority));
  if (CudaStatus s = InsertError(streams_.Insert(r.stream, handle), "stream", r.stream); !s.ok()) {
    (void)session_->StreamDestroy(handle);
    return s;
  }
  stream_params_[r.stream] = {r.flags, r.priority};
  counters_->streams += 1;
  return StreamCreateReply{};
}

CudaResult<StreamDestroyReply> ClientConnection::Handle(const StreamDestroyRequest& r, Io&) {
  std::optional<StreamHandle> handle = r.stream == 0 ? std::nullopt : streams_.Erase(r.stream);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no stream " + std::to_string(r.stream));
  }
  stream_params_.erase(r.stream);
  counters_->streams -= 1;
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamDestroy(*handle));
  return StreamDestroyReply{};
}

CudaResult<StreamSynchronizeReply> ClientConnection::Handle(const StreamSynchronizeRequest& r,
                                                            Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  return StreamSynchronizeReply{};
}

CudaResult<StreamQueryReply> ClientConnection::Handle(const StreamQueryRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamQuery(stream));
  return StreamQueryReply{};
}

CudaResult<StreamWaitEventReply> ClientConnection::Handle(const StreamWaitEventRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamWaitEvent(stream, event, r.flags));
  return StreamWaitEventReply{};
}

CudaResult<EventCreateReply> ClientConnection::Handle(const EventCreateRequest& r, Io&) {
  if ((r.flags & ~0x7u) != 0) {
    return Error(CudaError::kInvalidValue, "unknown event flags " + Hex(r.flags));
  }
  if (r.event == 0 || events_.Find(r.event)) {
    return InsertError(r.event == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "event",
                       r.event);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle handle, session_->EventCreate(r.flags));
  if (CudaStatus s = InsertError(events_.Insert(r.event, handle), "event", r.event); !s.ok()) {
    (void)session_->EventDestroy(handle);
    return s;
  }
  event_flags_[r.event] = r.flags;
  counters_->events += 1;
  return EventCreateReply{};
}

CudaResult<EventDestroyReply> ClientConnection::Handle(const EventDestroyRequest& r, Io&) {
  std::optional<EventHandle> handle = events_.Erase(r.event);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no event " + std::to_string(r.event));
  }
  event_flags_.erase(r.event);
  counters_->events -= 1;
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventDestroy(*handle));
  return EventDestroyReply{};
}

CudaResult<EventRecordReply> ClientConnection::Handle(const EventRecordRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventRecord(event, stream));
  return EventRecordReply{};
}

CudaResult<EventSynchronizeReply> ClientConnection::Handle(const EventSynchronizeRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventSynchronize(event));
  return EventSynchronizeReply{};
}

CudaResult<EventQueryReply> ClientConnection::Handle(const EventQueryRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventQuery(event));
  return EventQueryReply{};
}

CudaResult<EventElapsedTimeReply> ClientConnection::Handle(const EventElapsedTimeRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle start, ResolveEvent(r.start));
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle end, ResolveEvent(r.end));
  FLYT_CUDA_ASSIGN_OR_RETURN(float ms, session_->EventElapsedMs(start, end));
  return EventElapsedTimeReply{ms};
}

}  // namespace flyt::remote
