#include "remote/protocol.h"

#include <array>
#include <string>

namespace flyt::remote {

void EncodeFrameHeader(const FrameHeader& header, std::byte out[kFrameHeaderBytes]) {
  Bytes bytes;
  bytes.reserve(kFrameHeaderBytes);
  Writer w(bytes);
  w.Put(header.payload_bytes);
  w.Put(static_cast<uint16_t>(header.call));
  w.Put(static_cast<uint8_t>(header.kind));
  w.Put(uint8_t{0});
  w.Put(header.seq);
  std::copy(bytes.begin(), bytes.end(), out);
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> in) {
  if (in.size() < kFrameHeaderBytes) return InvalidArgument("truncated frame header");
  Reader r(in.first(kFrameHeaderBytes));
  FrameHeader header;
  uint16_t call = 0;
  uint8_t kind = 0, flags = 0;
  if (!r.Get(header.payload_bytes) || !r.Get(call) || !r.Get(kind) || !r.Get(flags) ||
      !r.Get(header.seq)) {
    return InvalidArgument("truncated frame header");
  }
  if (flags != 0) return InvalidArgument("frame flags " + std::to_string(flags) + " are reserved");
  if (header.payload_bytes > kMaxFramePayload) {
    return InvalidArgument("frame of " + std::to_string(header.payload_bytes) +
                           " bytes exceeds the limit of " + std::to_string(kMaxFramePayload));
  }
  if (kind < static_cast<uint8_t>(FrameKind::kHello) ||
      kind > static_cast<uint8_t>(FrameKind::kNotice)) {
    return InvalidArgument("unknown frame kind " + std::to_string(kind));
  }
  header.kind = static_cast<FrameKind>(kind);
  header.call = static_cast<CallId>(call);
  bool hello = header.kind == FrameKind::kHello || header.kind == FrameKind::kHelloReply ||
               header.kind == FrameKind::kNotice;
  // A notice names no call (move: version 6) or ResizeServer (device facts changed: version 7).
  const bool resize_notice = header.kind == FrameKind::kNotice &&
                             header.call == CallId::kResizeServer;
  if (hello ? call != 0 && !resize_notice : !IsKnownCall(call)) {
    return InvalidArgument("unknown call " + std::to_string(call));
  }
  return header;
}

void Encode(Writer& w, const Dim3& value) {
  w.Put(value.x);
  w.Put(value.y);
  w.Put(value.z);
}
bool Decode(Reader& r, Dim3& value) { return r.Get(value.x) && r.Get(value.y) && r.Get(value.z); }

// Encoders and decoders, field by field in the listed order.
#define FLYT_FIELD(type, name) Encode(w, m.name);
#define FLYT_STRUCT(name, fields) \
  void Encode(Writer& w, const name& m) { fields }
#include "remote/wire_structs.def"
#undef FLYT_STRUCT
#define FLYT_CALL(id, name, mode, data, req, rep)                   \
  void Encode([[maybe_unused]] Writer& w, [[maybe_unused]] const name##Request& m) { req } \
  void Encode([[maybe_unused]] Writer& w, [[maybe_unused]] const name##Reply& m) { rep }
#include "remote/calls.def"
#undef FLYT_CALL
#undef FLYT_FIELD

#define FLYT_FIELD(type, name) \
  if (!Decode(r, m.name)) return false;
#define FLYT_STRUCT(name, fields) \
  bool Decode(Reader& r, name& m) {     \
    fields return true;                 \
  }
#include "remote/wire_structs.def"
#undef FLYT_STRUCT
#define FLYT_CALL(id, name, mode, data, req, rep)                                        \
  bool Decode([[maybe_unused]] Reader& r, [[maybe_unused]] name##Request& m) {           \
    req return true;                                                                     \
  }                                                                                      \
  bool Decode([[maybe_unused]] Reader& r, [[maybe_unused]] name##Reply& m) { rep return true; }
#include "remote/calls.def"
#undef FLYT_CALL
#undef FLYT_FIELD

void Encode(Writer& w, const HelloRequest& m) {
  Encode(w, m.magic);
  Encode(w, m.min_version);
  Encode(w, m.max_version);
  Encode(w, m.capabilities);
  Encode(w, m.client_label);
  Encode(w, m.pid);
  Encode(w, m.runtime_version);
  if (!m.secret.empty() || !m.resume.empty()) Encode(w, m.secret);
  if (!m.resume.empty()) Encode(w, m.resume);
}

bool Decode(Reader& r, HelloRequest& m) {
  if (!Decode(r, m.magic) || !Decode(r, m.min_version) || !Decode(r, m.max_version) ||
      !Decode(r, m.capabilities) || !Decode(r, m.client_label) || !Decode(r, m.pid) ||
      !Decode(r, m.runtime_version)) {
    return false;
  }
  m.secret.clear();
  m.resume.clear();
  if (r.done()) return true;  // a version 1 hello, or a client without a secret
  if (!Decode(r, m.secret) || m.secret.size() > kMaxSecretBytes) return false;
  // An empty secret is present only before a resume token (the encoding stays canonical).
  if (r.done()) return !m.secret.empty();
  return Decode(r, m.resume) && !m.resume.empty() && m.resume.size() <= kMaxResumeTokenBytes;
}

namespace {

struct CallInfo {
  CallId id;
  std::string_view name;
  CallMode mode;
  DataFlow data;
};

constexpr CallInfo kCalls[] = {
#define FLYT_CALL(id, name, mode, data, req, rep) \
  {CallId::k##name, #name, CallMode::mode, DataFlow::data},
#include "remote/calls.def"
#undef FLYT_CALL
};

constexpr std::array<CallId, std::size(kCalls)> kCallIds = [] {
  std::array<CallId, std::size(kCalls)> ids{};
  for (size_t i = 0; i < std::size(kCalls); ++i) ids[i] = kCalls[i].id;
  return ids;
}();

// Ids are unique (a duplicate would also fail to compile as a duplicate case in the server's
// dispatch, but say it here, next to the list).
constexpr bool IdsUnique() {
  for (size_t i = 0; i < std::size(kCalls); ++i) {
    for (size_t j = i + 1; j < std::size(kCalls); ++j) {
      if (kCalls[i].id == kCalls[j].id) return false;
    }
    if (kCalls[i].id == CallId::kNone) return false;
  }
  return true;
}
static_assert(IdsUnique(), "calls.def: every call needs its own non-zero id");

const CallInfo* Find(CallId id) {
  for (const CallInfo& info : kCalls) {
    if (info.id == id) return &info;
  }
  return nullptr;
}

}  // namespace

bool IsKnownCall(uint16_t id) { return Find(static_cast<CallId>(id)) != nullptr; }

std::string_view CallName(CallId id) {
  const CallInfo* info = Find(id);
  return info ? info->name : std::string_view();
}

std::optional<CallMode> ModeOf(CallId id) {
  const CallInfo* info = Find(id);
  if (!info) return std::nullopt;
  return info->mode;
}

std::optional<DataFlow> DataOf(CallId id) {
  const CallInfo* info = Find(id);
  if (!info) return std::nullopt;
  return info->data;
}

std::span<const CallId> AllCalls() { return kCallIds; }

}  // namespace flyt::remote
