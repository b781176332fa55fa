#include "remote/protocol.h"

#include <gtest/gtest.h>

#include <set>

#include "remote/cuda_status.h"

namespace flyt::remote {
namespace {

TEST(ProtocolTest, FrameHeaderRoundTrips) {
  FrameHeader header{1234, CallId::kLaunchKernel, FrameKind::kPost, 0xDEADBEEF};
  std::byte raw[kFrameHeaderBytes];
  EncodeFrameHeader(header, raw);
  Result<FrameHeader> back = DecodeFrameHeader(raw);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, header);
}

TEST(ProtocolTest, FrameBoundsAreEnforced) {
  std::byte raw[kFrameHeaderBytes];
  EncodeFrameHeader({kMaxFramePayload, CallId::kMalloc, FrameKind::kCall, 1}, raw);
  EXPECT_TRUE(DecodeFrameHeader(raw).ok());
  EncodeFrameHeader({kMaxFramePayload + 1, CallId::kMalloc, FrameKind::kCall, 1}, raw);
  Result<FrameHeader> too_big = DecodeFrameHeader(raw);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("exceeds"), std::string::npos);
  EXPECT_FALSE(DecodeFrameHeader(std::span<const std::byte>(raw, 11)).ok());
}

TEST(ProtocolTest, HeaderRejectsUnknownKindsCallsAndFlags) {
  std::byte raw[kFrameHeaderBytes];
  EncodeFrameHeader({0, CallId::kMalloc, FrameKind::kCall, 1}, raw);
  raw[6] = std::byte{0};  // kind 0
  EXPECT_FALSE(DecodeFrameHeader(raw).ok());
  raw[6] = std::byte{8};  // past kNotice
  EXPECT_FALSE(DecodeFrameHeader(raw).ok());
  EncodeFrameHeader({0, CallId::kMalloc, FrameKind::kCall, 1}, raw);
  raw[7] = std::byte{1};  // flags
  EXPECT_FALSE(DecodeFrameHeader(raw).ok());
  EncodeFrameHeader({0, static_cast<CallId>(999), FrameKind::kCall, 1}, raw);
  EXPECT_FALSE(DecodeFrameHeader(raw).ok());
  // Hello frames carry call 0 and nothing else.
  EncodeFrameHeader({0, CallId::kNone, FrameKind::kHello, 0}, raw);
  EXPECT_TRUE(DecodeFrameHeader(raw).ok());
  EncodeFrameHeader({0, CallId::kMalloc, FrameKind::kHello, 0}, raw);
  EXPECT_FALSE(DecodeFrameHeader(raw).ok());
}

TEST(ProtocolTest, GeneratedCallListIsConsistent) {
  std::set<uint16_t> ids;
  std::set<std::string_view> names;
  for (CallId id : AllCalls()) {
    EXPECT_TRUE(ids.insert(static_cast<uint16_t>(id)).second);
    EXPECT_TRUE(names.insert(CallName(id)).second);
    EXPECT_TRUE(IsKnownCall(static_cast<uint16_t>(id)));
    EXPECT_TRUE(ModeOf(id).has_value());
  }
  EXPECT_GE(ids.size(), 30u);
  EXPECT_FALSE(IsKnownCall(0));
  EXPECT_EQ(CallName(static_cast<CallId>(65535)), "");
  // Asynchrony is part of the contract: launches, async copies, memsets, event records and
  // creations are posted; anything whose result the program needs is a call.
  EXPECT_EQ(ModeOf(CallId::kLaunchKernel), CallMode::kPost);
  EXPECT_EQ(ModeOf(CallId::kMemcpyHtoDAsync), CallMode::kPost);
  EXPECT_EQ(ModeOf(CallId::kMemcpyDtoHAsync), CallMode::kPost);
  EXPECT_EQ(ModeOf(CallId::kMemset), CallMode::kPost);
  EXPECT_EQ(ModeOf(CallId::kEventRecord), CallMode::kPost);
  EXPECT_EQ(ModeOf(CallId::kStreamCreate), CallMode::kPost);
  EXPECT_EQ(ModeOf(CallId::kMalloc), CallMode::kCall);
  EXPECT_EQ(ModeOf(CallId::kStreamSynchronize), CallMode::kCall);
  EXPECT_EQ(DataOf(CallId::kMemcpyHtoD), DataFlow::kIn);
  EXPECT_EQ(DataOf(CallId::kMemcpyDtoHAsync), DataFlow::kOut);
  EXPECT_EQ(DataOf(CallId::kModuleLoad), DataFlow::kIn);
  EXPECT_EQ(CallTraits<CallId::kMalloc>::kName, "Malloc");
  static_assert(CallTraits<CallId::kLaunchKernel>::kMode == CallMode::kPost);
}

// Every call's request and reply survive encode → decode, with non-default values in every field
// of the ones that matter most.
template <typename Message>
void ExpectRoundTrip(const Message& message) {
  Bytes out;
  Writer w(out);
  Encode(w, message);
  Message back;
  ASSERT_TRUE(DecodeExactly(out, back));
  EXPECT_TRUE(back == message);
  // Every strict prefix is malformed.
  for (size_t n = 0; n < out.size(); ++n) {
    Message partial;
    EXPECT_FALSE(DecodeExactly(std::span<const std::byte>(out.data(), n), partial)) << n;
  }
}

TEST(ProtocolTest, EveryMessageRoundTrips) {
#define FLYT_CALL(id, name, mode, data, req, rep) \
  ExpectRoundTrip(name##Request{});               \
  ExpectRoundTrip(name##Reply{});
#include "remote/calls.def"
#undef FLYT_CALL

  LaunchKernelRequest launch;
  launch.function = 42;
  launch.grid = {7, 8, 9};
  launch.block = {256, 1, 2};
  launch.shared_bytes = 4096;
  launch.stream = 3;
  launch.params = {std::byte{1}, std::byte{0}, std::byte{0xFF}};
  ExpectRoundTrip(launch);

  GetDevicePropertiesReply props;
  props.name = "NVIDIA H100";
  props.uuid = Bytes(16, std::byte{0xAA});
  props.values = {{"multiProcessorCount", 132}, {"maxGridSize[1]", 65535}, {"neg", -1}};
  ExpectRoundTrip(props);

  DebugStatsReply stats;
  stats.clients.push_back({1, "prog", true, 2, 4096, 1, 1, 1, 10, 100, 200});
  stats.allocated_bytes = 4096;
  ExpectRoundTrip(stats);

  HelloRequest hello{kHelloMagic, 1, 1, kAllCapabilities, "a.out on host (pid 5)", 5, 13000};
  ExpectRoundTrip(hello);
  ReplyStatus rs{1, "bad", 700, 47, 99, "illegal address"};
  ExpectRoundTrip(rs);
}

TEST(ProtocolTest, AppendFrameWritesHeaderAndPayload) {
  Bytes out;
  MallocRequest request{1 << 20};
  AppendFrame(out, FrameKind::kCall, CallId::kMalloc, 5, request);
  ASSERT_EQ(out.size(), kFrameHeaderBytes + 8);
  Result<FrameHeader> header = DecodeFrameHeader(out);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->payload_bytes, 8u);
  EXPECT_EQ(header->seq, 5u);
  MallocRequest back;
  ASSERT_TRUE(DecodeExactly(std::span<const std::byte>(out).subspan(kFrameHeaderBytes), back));
  EXPECT_EQ(back.bytes, 1u << 20);
}

TEST(CudaStatusTest, NamesDescriptionsAndStickiness) {
  EXPECT_EQ(CudaErrorName(CudaError::kSuccess), "cudaSuccess");
  EXPECT_EQ(CudaErrorName(CudaError::kInvalidValue), "cudaErrorInvalidValue");
  EXPECT_EQ(CudaErrorDescription(CudaError::kMemoryAllocation), "out of memory");
  EXPECT_EQ(CudaErrorDescription(CudaError::kIllegalAddress),
            "an illegal memory access was encountered");
  EXPECT_EQ(CudaErrorName(static_cast<CudaError>(12345)), "cudaErrorUnknown");
  EXPECT_EQ(CudaErrorDescription(static_cast<CudaError>(12345)), "unrecognized error code");
  EXPECT_TRUE(IsStickyCudaError(CudaError::kIllegalAddress));
  EXPECT_TRUE(IsStickyCudaError(CudaError::kLaunchFailure));
  EXPECT_FALSE(IsStickyCudaError(CudaError::kInvalidValue));
  EXPECT_FALSE(IsStickyCudaError(CudaError::kNotReady));
  EXPECT_TRUE(IsKnownCudaError(700));
  EXPECT_FALSE(IsKnownCudaError(12345));
  CudaStatus s(CudaError::kInvalidValue, "bad pointer");
  EXPECT_EQ(s.ToString(), "cudaErrorInvalidValue (invalid argument): bad pointer");
}

}  // namespace
}  // namespace flyt::remote

namespace flyt::remote {
namespace {

// A version 1 hello: the fields before the secret, as a version 1 client encodes them.
Bytes VersionOneHello() {
  Bytes out;
  Writer w(out);
  w.Put(kHelloMagic);
  w.Put(uint16_t{1});
  w.Put(uint16_t{1});
  w.Put(uint64_t{kAllCapabilities});
  w.Put(std::string("old client"));
  w.Put(uint32_t{42});
  w.Put(int32_t{12080});
  return out;
}

TEST(HelloTest, AVersionOneHelloStillDecodesWithNoSecret) {
  Bytes v1 = VersionOneHello();
  HelloRequest hello;
  ASSERT_TRUE(DecodeExactly(v1, hello));
  EXPECT_EQ(hello.max_version, 1);
  EXPECT_EQ(hello.client_label, "old client");
  EXPECT_EQ(hello.runtime_version, 12080);
  EXPECT_TRUE(hello.secret.empty());
  // And a client with no secret encodes exactly what a version 1 client did, so version 1
  // servers (which decode exactly) still serve it.
  hello.max_version = 1;
  Bytes again;
  Writer w(again);
  Encode(w, hello);
  EXPECT_EQ(again, v1);
}

TEST(HelloTest, TheSecretRoundTripsAndAnEmptyOrHugeOneIsMalformed) {
  HelloRequest hello{kHelloMagic, 1, kProtocolVersion, kAllCapabilities, "new", 7, 13000,
                     std::string(48, 'k')};
  Bytes bytes;
  Writer w(bytes);
  Encode(w, hello);
  HelloRequest back;
  ASSERT_TRUE(DecodeExactly(bytes, back));
  EXPECT_EQ(back, hello);
  EXPECT_EQ(kProtocolVersion, 9);
  EXPECT_EQ(MinProtocolVersionOf(CallId::kPoolBlockAt), 9);
  // The staged copy (version 8) is not sent to an older server.
  EXPECT_EQ(MinProtocolVersionOf(CallId::kMemcpyDtoHStagedAsync), 8);
  EXPECT_EQ(MinProtocolVersionOf(CallId::kClientShares), 7);

  Bytes empty_secret = VersionOneHello();
  Writer(empty_secret).Put(std::string());
  EXPECT_FALSE(DecodeExactly(empty_secret, back));
  Bytes huge = VersionOneHello();
  Writer(huge).Put(std::string(kMaxSecretBytes + 1, 'h'));
  EXPECT_FALSE(DecodeExactly(huge, back));
  Bytes trailing = bytes;
  trailing.push_back(std::byte{0});
  EXPECT_FALSE(DecodeExactly(trailing, back));
}

TEST(HelloTest, AResumeTokenRoundTripsWithOrWithoutASecret) {
  for (std::string secret : {std::string(), std::string(16, 's')}) {
    HelloRequest hello{kHelloMagic, 1, kProtocolVersion, kAllCapabilities, "moved", 7, 13000,
                       secret, "12-00112233445566778899aabbccddeeff"};
    Bytes bytes;
    Writer w(bytes);
    Encode(w, hello);
    HelloRequest back;
    ASSERT_TRUE(DecodeExactly(bytes, back));
    EXPECT_EQ(back, hello);
  }
  // An empty secret with nothing after it, an empty token and a huge one are malformed.
  Bytes bare_empty_secret = VersionOneHello();
  Writer(bare_empty_secret).Put(std::string());
  HelloRequest back;
  EXPECT_FALSE(DecodeExactly(bare_empty_secret, back));
  Bytes empty_token = VersionOneHello();
  Writer(empty_token).Put(std::string());
  Writer(empty_token).Put(std::string());
  EXPECT_FALSE(DecodeExactly(empty_token, back));
  Bytes huge_token = VersionOneHello();
  Writer(huge_token).Put(std::string());
  Writer(huge_token).Put(std::string(kMaxResumeTokenBytes + 1, 't'));
  EXPECT_FALSE(DecodeExactly(huge_token, back));
}

TEST(ProtocolTest, TheNoticeFrameDecodesOnlyWithoutACall) {
  std::byte raw[kFrameHeaderBytes];
  EncodeFrameHeader({0, CallId::kNone, FrameKind::kNotice, 0}, raw);
  auto header = DecodeFrameHeader(raw);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->kind, FrameKind::kNotice);
  EncodeFrameHeader({0, CallId::kMigrate, FrameKind::kNotice, 0}, raw);
  EXPECT_FALSE(DecodeFrameHeader(raw).ok());
  EncodeFrameHeader({0, CallId::kResizeServer, FrameKind::kNotice, 0}, raw);
  EXPECT_TRUE(DecodeFrameHeader(raw).ok());  // version 7: a new SM share
  EXPECT_EQ(MinProtocolVersionOf(CallId::kMigrate), 6);
  EXPECT_EQ(MinProtocolVersionOf(CallId::kMallocAt), 6);
  EXPECT_EQ(MinProtocolVersionOf(CallId::kImportFinish), 6);
  EXPECT_EQ(MinProtocolVersionOf(CallId::kResizeServer), 7);
  EXPECT_EQ(MinProtocolVersionOf(CallId::kClientShares), 7);
}

}  // namespace
}  // namespace flyt::remote
