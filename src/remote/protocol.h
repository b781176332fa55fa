// flyt's remote CUDA protocol: framing, the hello, and every call's messages (from calls.def).
//
// A connection is a byte stream (TCP or a Unix socket) of frames. Each frame is a 12-byte header
//   u32 payload_bytes | u16 call | u8 kind | u8 flags (0) | u32 seq
// (little-endian) and a payload of at most kMaxFramePayload bytes; a longer one is a protocol
// error and the connection is closed. Kinds:
//   kHello / kHelloReply   the first frame each way (version and capability negotiation);
//   kCall                  a request the client waits on; answered by one kReply with its seq;
//   kPost                  a request with no reply (pipelined; errors deferred to the next reply);
//   kReply                 ReplyStatus, then the reply's fields when the code is 0;
//   kData                  u64 offset, then raw bytes: a chunk of the bulk data of request `seq`;
//   kNotice                (version 6, server to client, call kNone, seq 0, empty payload) the
//                          server asks the client to call Migrate once the call it waits on has
//                          returned: an operator moves it to another server (live migration).
//                          (version 7) With call ResizeServer: the client runs on a new SM share
//                          from this reply on; its cached device facts are stale.
// The client numbers its requests (seq, from 1, wrapping); the server echoes seq in replies and
// in the data frames it sends for a device-to-host copy. No CUDA struct travels raw: device
// properties go field by field by name, attributes and error codes by their stable numbers.
//
// Direction rule that keeps both ends from blocking on each other: the server writes only while
// the client waits for a reply (data of finished device-to-host copies goes out just before a
// reply), and the client never writes while it waits.
//
// Pure functions and plain structs; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/types.h"
#include "remote/wire.h"

namespace flyt::remote {

inline constexpr uint32_t kHelloMagic = 0x54594C46;  // "FLYT"
// Version 2: the hello may carry the server's secret (HelloRequest::secret). Version 3: the
// calls of issue 17 (graphs, pools, arrays and textures, managed memory, attributes). Version 4:
// interprocess memory and events (cudaIpc*). Version 5: the shared-memory transport's copies
// through the arena, the server's local endpoint, and the transport of each client in stats.
// Version 6: live migration (the kNotice frame, the hello's resume token, calls 180-184).
// Version 7: resizing a running server (ResizeServer, ClientShares: calls 185-189). Version 8:
// device-to-host copies staged in the arena for cudaHostRegister'd memory (call 190). Version 9:
// memory pools in live migration (PoolBlockAt, calls 191-194), Migrate's answer a list of
// endpoints for a client on the new server's host, and shared-memory rings after a move.
inline constexpr uint16_t kProtocolVersion = 9;
inline constexpr uint16_t kMinProtocolVersion = 1;
inline constexpr uint32_t kMaxFramePayload = 4u << 20;
inline constexpr size_t kFrameHeaderBytes = 12;
// Bulk data is cut into Data frames of at most this many bytes (plus the 8-byte offset).
inline constexpr uint32_t kDataChunkBytes = 1u << 20;
static_assert(kDataChunkBytes + 8 <= kMaxFramePayload);
// A Data frame with one of these offsets carries no bytes. kDataAbandoned: the device-to-host
// copy of its seq failed and will not come. kDataInArena: the copy of its seq (a
// MemcpyDtoHStagedAsync) has landed in the client's arena, whose range the client copies on.
inline constexpr uint64_t kDataAbandoned = ~uint64_t{0};
inline constexpr uint64_t kDataInArena = ~uint64_t{0} - 1;

// Capability bits offered in the hello; a peer uses only those both sides set.
enum Capability : uint64_t {
  kCapPostedCalls = 1u << 0,   // kPost frames and deferred errors
  kCapAsyncDtoH = 1u << 1,     // MemcpyDtoHAsync data delivered before a later reply
  kCapDebugStats = 1u << 2,    // the DebugStats call
  kCapServerCounters = 1u << 3,  // the ServerCounters call
  // The shared-memory transport (shm_channel.h). Offered by a client connected over a Unix
  // socket; a server that takes it sends the memfd and its wake-up eventfds with the hello reply
  // (SCM_RIGHTS), and the client answers with a ShmAck hello frame before either end switches.
  kCapSharedMemory = 1u << 4,
  // Live migration (version 6): the client understands kNotice and calls Migrate when told to,
  // then says hello to the new server with the token it got (HelloRequest::resume).
  kCapMigration = 1u << 5,
  // This hello opens an import link: another server's process moves a client's state here
  // (MallocAt, ModuleGetGlobalAt, the ordinary create calls and copies, then ImportFinish).
  // Never offered by a runtime; not in kAllCapabilities.
  kCapMigrationImport = 1u << 6,
};
inline constexpr uint64_t kAllCapabilities = kCapPostedCalls | kCapAsyncDtoH | kCapDebugStats |
                                             kCapServerCounters | kCapSharedMemory |
                                             kCapMigration;
// The descriptors that come with a hello reply that offers shared memory, in this order: the
// memfd, the server's wake-up eventfd, the client's.
inline constexpr size_t kShmFdCount = 3;

// A hello reply's `error` that starts with this: the server serves as many clients as it may
// (--max-clients); trying again later may succeed. Clients report it as kResourceExhausted.
inline constexpr std::string_view kServerBusyPrefix = "server busy";
// A hello reply's `error` that starts with this: the server was started with a secret
// (--secret-file) and the hello's was absent or different. Clients report it as
// kPermissionDenied with reason "unauthenticated"; trying again with the same secret cannot help.
inline constexpr std::string_view kAuthRefusedPrefix = "unauthenticated";
// Secrets are at most this long on the wire (a longer one is a malformed hello).
inline constexpr size_t kMaxSecretBytes = 1024;
// Resume tokens (HelloRequest::resume) are at most this long.
inline constexpr size_t kMaxResumeTokenBytes = 256;

enum class FrameKind : uint8_t {
  kHello = 1,
  kHelloReply = 2,
  kCall = 3,
  kPost = 4,
  kReply = 5,
  kData = 6,
  kNotice = 7,
};

enum class CallId : uint16_t {
  kNone = 0,  // hello frames
#define FLYT_CALL(id, name, mode, data, req, rep) k##name = id,
#include "remote/calls.def"
#undef FLYT_CALL
};

enum class CallMode : uint8_t { kCall, kPost };
enum class DataFlow : uint8_t { kNone, kIn, kOut };

struct FrameHeader {
  uint32_t payload_bytes = 0;
  CallId call = CallId::kNone;
  FrameKind kind = FrameKind::kCall;
  uint32_t seq = 0;
  bool operator==(const FrameHeader&) const = default;
};

void EncodeFrameHeader(const FrameHeader& header, std::byte out[kFrameHeaderBytes]);
// Rejects an unknown kind, non-zero flags, a payload over kMaxFramePayload, and a call id that
// is not in calls.def for kCall/kPost/kReply/kData frames (the reply's and data's call must name
// a known call; hello frames carry CallId::kNone).
[[nodiscard]] Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> in);

// ---- messages ------------------------------------------------------------------------------

void Encode(Writer& w, const Dim3& value);
bool Decode(Reader& r, Dim3& value);

#define FLYT_FIELD(type, name) type name{};
#define FLYT_STRUCT(name, fields)                   \
  struct name {                                     \
    fields bool operator==(const name&) const = default; \
  };
#include "remote/wire_structs.def"
#undef FLYT_STRUCT
#define FLYT_CALL(id, name, mode, data, req, rep)             \
  struct name##Request {                                      \
    req bool operator==(const name##Request&) const = default; \
  };                                                          \
  struct name##Reply {                                        \
    rep bool operator==(const name##Reply&) const = default;  \
  };
#include "remote/calls.def"
#undef FLYT_CALL
#undef FLYT_FIELD

// The client's hello. Fields in this order on the wire; `secret` (protocol version 2) follows
// only when it is not empty, so a version 1 hello (which ends after runtime_version) decodes with
// an empty secret, and a client without a secret still talks to a version 1 server. A present but
// empty secret, or one over kMaxSecretBytes, does not decode (the encoding stays canonical).
struct HelloRequest {
  uint32_t magic{};
  uint16_t min_version{};
  uint16_t max_version{};
  uint64_t capabilities{};
  std::string client_label{};
  uint32_t pid{};
  int32_t runtime_version{};
  std::string secret{};
  // Version 6: the token a migrated client got from its old server (MigrateReply::token), which
  // makes this hello the client's arrival at the server it moved to; empty for any other hello.
  std::string resume{};
  bool operator==(const HelloRequest&) const = default;
};
void Encode(Writer& w, const HelloRequest& m);
[[nodiscard]] bool Decode(Reader& r, HelloRequest& m);

#define FLYT_STRUCT(name, fields)          \
  void Encode(Writer& w, const name& m);   \
  [[nodiscard]] bool Decode(Reader& r, name& m);
#include "remote/wire_structs.def"
#undef FLYT_STRUCT
#define FLYT_CALL(id, name, mode, data, req, rep)             \
  void Encode(Writer& w, const name##Request& m);             \
  [[nodiscard]] bool Decode(Reader& r, name##Request& m);     \
  void Encode(Writer& w, const name##Reply& m);               \
  [[nodiscard]] bool Decode(Reader& r, name##Reply& m);
#include "remote/calls.def"
#undef FLYT_CALL

// Compile-time facts about each call.
template <CallId kId>
struct CallTraits;
#define FLYT_CALL(id, name, mode, data, req, rep)                    \
  template <>                                                        \
  struct CallTraits<CallId::k##name> {                               \
    using Request = name##Request;                                   \
    using Reply = name##Reply;                                       \
    static constexpr CallId kId = CallId::k##name;                   \
    static constexpr CallMode kMode = CallMode::mode;                \
    static constexpr DataFlow kData = DataFlow::data;                \
    static constexpr std::string_view kName = #name;                 \
  };
#include "remote/calls.def"
#undef FLYT_CALL

// The first protocol version that has the call: 7 for resizing (185-189), 6 for live migration
// (180-184), 5 for the shared-memory transport's calls (wire
// ids 62 and 160-179), 4 for interprocess memory and events (142-159), 3 for issue 17's other
// families (wire ids 70 and up), 1 for the rest. A client does not send a call its server's
// version lacks.
constexpr uint16_t MinProtocolVersionOf(CallId id) {
  const auto n = static_cast<uint16_t>(id);
  if (n >= 191 && n <= 194) return 9;
  if (n == 190) return 8;
  if (n >= 185 && n <= 189) return 7;
  if (n >= 180 && n <= 184) return 6;
  if (n == 62 || (n >= 160 && n <= 179)) return 5;
  if (n >= 142 && n <= 159) return 4;
  return n >= 70 ? 3 : 1;
}

// The same facts at run time; nullopt / "" for a number not in calls.def.
bool IsKnownCall(uint16_t id);
std::string_view CallName(CallId id);
std::optional<CallMode> ModeOf(CallId id);
std::optional<DataFlow> DataOf(CallId id);
// Every call in calls.def, in order (for tests and the fuzzer).
std::span<const CallId> AllCalls();

// Encodes a whole message (header + payload) of `kind` into `out` (appended).
template <typename Message>
void AppendFrame(Bytes& out, FrameKind kind, CallId call, uint32_t seq, const Message& message) {
  size_t start = out.size();
  out.resize(start + kFrameHeaderBytes);
  Writer w(out);
  Encode(w, message);
  FrameHeader header{static_cast<uint32_t>(out.size() - start - kFrameHeaderBytes), call, kind,
                     seq};
  EncodeFrameHeader(header, out.data() + start);
}

// Decodes a payload that must be exactly one `Message`.
template <typename Message>
[[nodiscard]] bool DecodeExactly(std::span<const std::byte> payload, Message& message) {
  Reader r(payload);
  return Decode(r, message) && r.done();
}

}  // namespace flyt::remote
