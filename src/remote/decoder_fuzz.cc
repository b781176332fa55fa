// libFuzzer entry point for the protocol decoder (see CMakeLists.txt). The input is read as a
// stream of frames, the way the server and the client read their sockets: each header is decoded
// and its payload decoded as whatever the header says it is (hello, any call's request, a reply,
// a data chunk). Besides "never crash, never read out of bounds", it checks that whatever decodes
// re-encodes to exactly the same bytes (the encoding is canonical), and aborts otherwise.
//
// Also linked into remote_unit_test, which replays tests/data/remote/corpus through it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "remote/protocol.h"

namespace flyt::remote {
namespace {

template <typename Message>
void CheckRoundTrip(std::span<const std::byte> payload) {
  Message message;
  if (!DecodeExactly(payload, message)) return;
  Bytes again;
  Writer w(again);
  Encode(w, message);
  if (again.size() != payload.size() ||
      !std::equal(again.begin(), again.end(), payload.begin())) {
    std::abort();
  }
}

template <typename Reply>
void CheckReply(std::span<const std::byte> payload) {
  Reader r(payload);
  ReplyStatus status;
  if (!Decode(r, status)) return;
  if (status.code != 0) return;
  Reply reply;
  if (!Decode(r, reply) || !r.done()) return;
  Bytes again;
  Writer w(again);
  Encode(w, status);
  Encode(w, reply);
  if (again.size() != payload.size() ||
      !std::equal(again.begin(), again.end(), payload.begin())) {
    std::abort();
  }
}

void DecodePayload(const FrameHeader& header, std::span<const std::byte> payload) {
  switch (header.kind) {
    case FrameKind::kHello:
      CheckRoundTrip<HelloRequest>(payload);
      return;
    case FrameKind::kHelloReply:
      CheckRoundTrip<HelloReply>(payload);
      return;
    case FrameKind::kData: {
      Reader r(payload);
      uint64_t offset = 0;
      (void)r.Get(offset);
      return;
    }
    case FrameKind::kNotice:  // no payload to decode (a peer ignores one)
      return;
    case FrameKind::kCall:
    case FrameKind::kPost:
    case FrameKind::kReply:
      break;
  }
  switch (header.call) {
#define FLYT_CALL(id, name, mode, data, req, rep)                 \
  case CallId::k##name:                                           \
    if (header.kind == FrameKind::kReply) {                       \
      CheckReply<name##Reply>(payload);                           \
    } else {                                                      \
      CheckRoundTrip<name##Request>(payload);                     \
    }                                                             \
    return;
#include "remote/calls.def"
#undef FLYT_CALL
    case CallId::kNone:
      return;
  }
}

}  // namespace
}  // namespace flyt::remote

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flyt::remote;
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  while (in.size() >= kFrameHeaderBytes) {
    flyt::Result<FrameHeader> header = DecodeFrameHeader(in.first(kFrameHeaderBytes));
    if (!header.ok()) break;
    in = in.subspan(kFrameHeaderBytes);
    size_t n = std::min<size_t>(header->payload_bytes, in.size());
    DecodePayload(*header, in.first(n));
    in = in.subspan(n);
  }
  return 0;
}
