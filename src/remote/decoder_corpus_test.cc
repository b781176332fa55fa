// Replays the decoder fuzzer's seed corpus (tests/data/remote/corpus) and deterministic mutations
// of it through the fuzz target, so every build exercises what the fuzzer exercises.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "remote/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace flyt::remote {
namespace {

std::vector<std::vector<uint8_t>> LoadCorpus() {
  std::vector<std::vector<uint8_t>> out;
  std::filesystem::path dir = std::filesystem::path(FLYT_SOURCE_DIR) / "tests/data/remote/corpus";
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

TEST(DecoderCorpusTest, SeedsDecode) {
  auto corpus = LoadCorpus();
  ASSERT_GE(corpus.size(), 5u) << "tests/data/remote/corpus is missing";
  for (const auto& input : corpus) LLVMFuzzerTestOneInput(input.data(), input.size());
}

TEST(DecoderCorpusTest, MutationsNeverCrash) {
  auto corpus = LoadCorpus();
  std::mt19937 rng(20260101);
  for (const auto& seed : corpus) {
    for (int round = 0; round < 300; ++round) {
      std::vector<uint8_t> input = seed;
      int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits && !input.empty(); ++e) {
        size_t at = rng() % input.size();
        switch (rng() % 4) {
          case 0:
            input[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
            break;
          case 1:
            input[at] = static_cast<uint8_t>(rng());
            break;
          case 2:
            input.resize(at);
            break;
          case 3:
            input.insert(input.begin() + static_cast<long>(at), static_cast<uint8_t>(rng()));
            break;
        }
      }
      LLVMFuzzerTestOneInput(input.data(), input.size());
    }
  }
}

}  // namespace
}  // namespace flyt::remote

namespace flyt::remote {
namespace {

// FLYT_REGENERATE_CORPUS=1 remote_unit_test --gtest_filter=*Regenerate* rewrites the seeds from
// the encoders, so the corpus follows the protocol when calls.def changes.
TEST(DecoderCorpusTest, Regenerate) {
  if (std::getenv("FLYT_REGENERATE_CORPUS") == nullptr) GTEST_SKIP() << "not asked to";
  std::filesystem::path dir = std::filesystem::path(FLYT_SOURCE_DIR) / "tests/data/remote/corpus";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const Bytes& bytes) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
  };
  Bytes hello;
  AppendFrame(hello, FrameKind::kHello, CallId::kNone, 0,
              HelloRequest{kHelloMagic, 1, 1, kAllCapabilities, "corpus", 1, 13000});
  write("hello", hello);
  Bytes hello_secret;  // protocol version 2: the hello carries the server's secret
  AppendFrame(hello_secret, FrameKind::kHello, CallId::kNone, 0,
              HelloRequest{kHelloMagic, 1, 2, kAllCapabilities, "corpus", 1, 13000,
                           std::string(40, 's')});
  write("hello_secret", hello_secret);
  Bytes hello_reply;
  AppendFrame(hello_reply, FrameKind::kHelloReply, CallId::kNone, 0,
              HelloReply{kHelloMagic, 1, kAllCapabilities, kMaxFramePayload, 3, "server", "sim",
                         true, 13000, 1, ""});
  write("hello_reply", hello_reply);
  // One stream with a request of every call.
  Bytes all;
  uint32_t seq = 1;
#define FLYT_CALL(id, name, mode, data, req, rep)                                       \
  AppendFrame(all,                                                                      \
              CallMode::mode == CallMode::kCall ? FrameKind::kCall : FrameKind::kPost,  \
              CallId::k##name, seq++, name##Request{});
#include "remote/calls.def"
#undef FLYT_CALL
  write("every_call", all);
  // A realistic burst: create a stream, copy in (with its data frame), launch, copy back.
  Bytes burst;
  AppendFrame(burst, FrameKind::kPost, CallId::kStreamCreate, 1, StreamCreateRequest{5, 1, 0});
  AppendFrame(burst, FrameKind::kPost, CallId::kMemcpyHtoDAsync, 2,
              MemcpyHtoDAsyncRequest{0x800000001000, 4, 5});
  {
    size_t start = burst.size();
    burst.resize(start + kFrameHeaderBytes);
    Writer w(burst);
    w.Put(uint64_t{0});
    w.Put(uint32_t{0x01020304});
    EncodeFrameHeader({12, CallId::kMemcpyHtoDAsync, FrameKind::kData, 2},
                      burst.data() + start);
  }
  LaunchKernelRequest launch{7, {4, 1, 1}, {256, 1, 1}, 0, 5, Bytes(28, std::byte{0x11})};
  AppendFrame(burst, FrameKind::kPost, CallId::kLaunchKernel, 3, launch);
  AppendFrame(burst, FrameKind::kCall, CallId::kMemcpyDtoH, 4,
              MemcpyDtoHRequest{0x800000001000, 4, 5});
  write("burst", burst);
  // Replies a client reads.
  Bytes replies;
  {
    size_t start = replies.size();
    replies.resize(start + kFrameHeaderBytes);
    Writer w(replies);
    Encode(w, ReplyStatus{0, "", 700, 47, 3, "illegal address"});
    Encode(w, MallocReply{0x800000002000});
    EncodeFrameHeader({static_cast<uint32_t>(replies.size() - start - kFrameHeaderBytes),
                       CallId::kMalloc, FrameKind::kReply, 9},
                      replies.data() + start);
  }
  GetDevicePropertiesReply props{"NVIDIA H100", Bytes(16, std::byte{1}),
                                 {{"multiProcessorCount", 132}, {"warpSize", 32}}};
  {
    size_t start = replies.size();
    replies.resize(start + kFrameHeaderBytes);
    Writer w(replies);
    Encode(w, ReplyStatus{});
    Encode(w, props);
    EncodeFrameHeader({static_cast<uint32_t>(replies.size() - start - kFrameHeaderBytes),
                       CallId::kGetDeviceProperties, FrameKind::kReply, 10},
                      replies.data() + start);
  }
  write("replies", replies);
  // Hostile shapes: a frame claiming more than the limit, a zero-length call, garbage.
  Bytes oversized(kFrameHeaderBytes);
  EncodeFrameHeader({kMaxFramePayload, CallId::kLaunchKernel, FrameKind::kPost, 1},
                    oversized.data());
  oversized[0] = std::byte{0xFF};
  oversized[3] = std::byte{0xFF};
  write("oversized", oversized);
  Bytes empty_call(kFrameHeaderBytes);
  EncodeFrameHeader({0, CallId::kLaunchKernel, FrameKind::kPost, 1}, empty_call.data());
  write("empty_launch", empty_call);
}

}  // namespace
}  // namespace flyt::remote
