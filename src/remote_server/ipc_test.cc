// Interprocess memory and events on the server (sim backend, a thread and a process per client):
// one client exports, another opens and shares the bytes; every refusal of a bad or hostile
// handle (truncated, forged, another memfd, an unsealed or shrunk memfd, another process's
// descriptor) and of the calls CUDA forbids, with nothing lost on either side.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "remote_server/test_sim_server.h"

namespace flyt::remote {
namespace {

class IpcServerTest : public testing::SimServerTest {
 protected:
  IpcServerTest() : SimServerTest("ipc") {}
};

INSTANTIATE_TEST_SUITE_P(Isolation, IpcServerTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess));

Bytes Pattern(size_t n, int seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 31 + seed);
  return b;
}

TEST_P(IpcServerTest, AnotherClientOpensTheAllocationAndBothSeeTheSameBytes) {
  auto a = Open();
  auto b = Open();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (uint64_t size : {uint64_t{1000}, uint64_t{3} << 20}) {  // a heap block and a mapping
    auto d = a->Malloc({size});
    ASSERT_TRUE(d.ok());
    Bytes in = Pattern(size, 5);
    ASSERT_TRUE(a->MemcpyHtoD({d->ptr, size, 0}, in).ok());
    auto h = a->IpcGetMemHandle({d->ptr + size / 2});  // inside: the whole allocation
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_EQ(h->handle.size(), 64u);
    // The exporter's pointer still names its bytes after they moved into shared memory.
    Bytes out(size);
    ASSERT_TRUE(a->MemcpyDtoH({d->ptr, size, 0}, out).ok());
    EXPECT_EQ(out, in);

    auto o = b->IpcOpenMemHandle({h->handle, 1});
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->bytes, size);
    ASSERT_TRUE(b->MemcpyDtoH({o->ptr, size, 0}, out).ok());
    EXPECT_EQ(out, in);
    ASSERT_TRUE(b->Memset({o->ptr + 10, 0x66, 20, 0}).ok());
    ASSERT_TRUE(b->Sync({}).ok());  // the posted memset is done
    ASSERT_TRUE(a->MemcpyDtoH({d->ptr, size, 0}, out).ok());
    for (size_t i = 0; i < size; ++i) {
      ASSERT_EQ(out[i], i >= 10 && i < 30 ? std::byte{0x66} : in[i]) << i;
    }
    // Opened twice: the same pointer, closed twice.
    auto again = b->IpcOpenMemHandle({h->handle, 1});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->ptr, o->ptr);
    ASSERT_TRUE(b->IpcCloseMemHandle({o->ptr}).ok());
    ASSERT_TRUE(b->MemcpyDtoH({o->ptr, 16, 0}, std::span(out.data(), 16)).ok());
    ASSERT_TRUE(b->IpcCloseMemHandle({o->ptr}).ok());
    EXPECT_EQ(b->IpcCloseMemHandle({o->ptr}).status().code(), CudaError::kInvalidValue);
    EXPECT_FALSE(b->MemcpyDtoH({o->ptr, 16, 0}, std::span(out.data(), 16)).ok());
    // Exporting again gives a handle that opens the same bytes.
    auto h2 = a->IpcGetMemHandle({d->ptr});
    ASSERT_TRUE(h2.ok());
    EXPECT_EQ(h2->handle, h->handle);
    ASSERT_TRUE(a->Free({d->ptr}).ok());
  }
}

TEST_P(IpcServerTest, OpenedMemoryIsClosedNotFreedAndLeavesWithItsClient) {
  auto a = Open();
  auto b = Open();
  auto d = a->Malloc({8192});
  ASSERT_TRUE(d.ok());
  auto h = a->IpcGetMemHandle({d->ptr});
  ASSERT_TRUE(h.ok());
  auto o = b->IpcOpenMemHandle({h->handle, 0});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(b->Free({o->ptr}).ok());  // posted: the refusal comes with the next reply
  ASSERT_TRUE(b->Sync({}).ok());
  std::optional<AsyncError> refused = b->TakeAsyncError();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status.code(), CudaError::kInvalidValue);
  EXPECT_NE(refused->status.message().find("cudaIpcCloseMemHandle"), std::string::npos)
      << refused->status.message();
  // Not exportable again; not counted against the memory of the opener.
  EXPECT_EQ(b->IpcGetMemHandle({o->ptr}).status().code(), CudaError::kInvalidValue);
  // The opener goes: the exporter's memory is untouched.
  b.reset();
  Bytes in = Pattern(8192, 9), out(8192);
  ASSERT_TRUE(a->MemcpyHtoD({d->ptr, 8192, 0}, in).ok());
  ASSERT_TRUE(a->MemcpyDtoH({d->ptr, 8192, 0}, out).ok());
  EXPECT_EQ(out, in);
  // The exporter goes: a handle opened before stays usable; a new open is refused.
  auto c = Open();
  auto kept = c->IpcOpenMemHandle({h->handle, 1});
  ASSERT_TRUE(kept.ok());
  uint32_t exporter = 0;
  std::memcpy(&exporter, h->handle.data() + 8, 4);
  a.reset();
  ASSERT_TRUE(c->MemcpyDtoH({kept->ptr, 8192, 0}, out).ok());
  EXPECT_EQ(out, in);
  if (GetParam() == Isolation::kProcess) {  // the exporter's process goes with it
    for (int i = 0; i < 500 && ::kill(static_cast<pid_t>(exporter), 0) == 0; ++i) ::usleep(10000);
    ASSERT_TRUE(c->IpcCloseMemHandle({kept->ptr}).ok());  // else it is counted, not opened
    auto late = c->IpcOpenMemHandle({h->handle, 1});
    EXPECT_EQ(late.status().code(), CudaError::kInvalidValue);
  }
}

TEST_P(IpcServerTest, TheExporterCannotOpenItsOwnHandleAndTheOpenerIsCharged) {
  StartServer(uint64_t{8} << 20);  // 8 MiB for all clients together
  auto a = Open();
  auto b = Open();
  auto c = Open();
  const uint64_t three = uint64_t{3} << 20;
  auto d = a->Malloc({three});
  ASSERT_TRUE(d.ok());
  auto h = a->IpcGetMemHandle({d->ptr});
  ASSERT_TRUE(h.ok());
  auto own = a->IpcOpenMemHandle({h->handle, 1});
  EXPECT_EQ(own.status().code(), CudaError::kInvalidValue);
  auto o = b->IpcOpenMemHandle({h->handle, 1});  // 6 MiB counted
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(c->IpcOpenMemHandle({h->handle, 1}).status().code(), CudaError::kMemoryAllocation);
  // The exporter frees: the opener still holds the bytes, and they still count.
  ASSERT_TRUE(a->Free({d->ptr}).ok());
  ASSERT_TRUE(a->Sync({}).ok());
  Bytes out(16);
  ASSERT_TRUE(b->MemcpyDtoH({o->ptr, 16, 0}, out).ok());
  EXPECT_EQ(a->Malloc({uint64_t{6} << 20}).status().code(), CudaError::kMemoryAllocation);
  ASSERT_TRUE(b->IpcCloseMemHandle({o->ptr}).ok());
  auto again = a->Malloc({uint64_t{6} << 20});
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST_P(IpcServerTest, WhatCannotBeExported) {
  auto a = Open();
  EXPECT_EQ(a->IpcGetMemHandle({0x1234}).status().code(), CudaError::kInvalidValue);
  auto m = a->MallocManaged({4096, 0x100000000000ull, 1});
  ASSERT_TRUE(m.ok());
  auto managed = a->IpcGetMemHandle({m->ptr});
  EXPECT_EQ(managed.status().code(), CudaError::kInvalidValue);
  EXPECT_NE(managed.status().message().find("managed"), std::string::npos);
  auto pooled = a->MallocAsync({0, 4096, 0});
  ASSERT_TRUE(pooled.ok());
  EXPECT_EQ(a->IpcGetMemHandle({pooled->ptr}).status().code(), CudaError::kInvalidValue);
  ASSERT_TRUE(a->EventCreate({5, 0}).ok());
  EXPECT_EQ(a->IpcGetEventHandle({5}).status().code(), CudaError::kInvalidResourceHandle);
  EXPECT_EQ(a->IpcGetEventHandle({77}).status().code(), CudaError::kInvalidResourceHandle);
}

TEST_P(IpcServerTest, HostileHandlesAreRefusedAndHarmNoOne) {
  auto a = Open();
  auto b = Open();
  auto d = a->Malloc({4096});
  ASSERT_TRUE(d.ok());
  Bytes in = Pattern(4096, 3);
  ASSERT_TRUE(a->MemcpyHtoD({d->ptr, 4096, 0}, in).ok());
  auto h = a->IpcGetMemHandle({d->ptr});
  ASSERT_TRUE(h.ok());
  auto refused = [&](const Bytes& handle, uint32_t flags = 1) {
    auto r = b->IpcOpenMemHandle({handle, flags});
    return !r.ok() && r.status().code() == CudaError::kInvalidValue;
  };
  Bytes truncated(h->handle.begin(), h->handle.begin() + 63);
  EXPECT_TRUE(refused(truncated));
  EXPECT_TRUE(refused(h->handle, 2));  // unknown flag
  Bytes zeros(64);
  EXPECT_TRUE(refused(zeros));
  Bytes secret = h->handle;
  secret[30] ^= std::byte{1};  // a guessed secret
  EXPECT_TRUE(refused(secret));
  Bytes reserved = h->handle;
  reserved[50] = std::byte{1};
  EXPECT_TRUE(refused(reserved));
  Bytes bigger = h->handle;  // claims more bytes than the memfd holds
  uint64_t huge = uint64_t{1} << 30;
  std::memcpy(bigger.data() + 16, &huge, 8);
  EXPECT_TRUE(refused(bigger));
  Bytes other_fd = h->handle;  // the right process, another descriptor (stdin)
  uint32_t zero = 0;
  std::memcpy(other_fd.data() + 12, &zero, 4);
  EXPECT_TRUE(refused(other_fd));
  // A memfd of this (test) process with the very name, but unsealed: a peer could shrink it.
  {
    char link[128] = {};
    uint32_t pid = 0, fd = 0;
    std::memcpy(&pid, h->handle.data() + 8, 4);
    std::memcpy(&fd, h->handle.data() + 12, 4);
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
    ASSERT_GT(n, 0);
    std::string name(link + 7, static_cast<size_t>(n) - 7 - 10);  // "/memfd:" ... " (deleted)"
    int fake = ::memfd_create(name.c_str(), MFD_CLOEXEC);
    ASSERT_GE(fake, 0);
    ASSERT_EQ(::ftruncate(fake, 4096), 0);
    Bytes forged = h->handle;
    uint32_t me = static_cast<uint32_t>(::getpid()), fake_fd = static_cast<uint32_t>(fake);
    std::memcpy(forged.data() + 8, &me, 4);
    std::memcpy(forged.data() + 12, &fake_fd, 4);
    EXPECT_TRUE(refused(forged));
    ::close(fake);
  }
  // The exporter's memory and the opener are unharmed: the real handle still opens.
  auto o = b->IpcOpenMemHandle({h->handle, 1});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  Bytes out(4096);
  ASSERT_TRUE(b->MemcpyDtoH({o->ptr, 4096, 0}, out).ok());
  EXPECT_EQ(out, in);
  EXPECT_EQ(b->IpcCloseMemHandle({d->ptr + 1}).status().code(), CudaError::kInvalidValue);
}

TEST_P(IpcServerTest, EventsOpenInAnotherClient) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a->EventCreate({9, 0x4 | 0x2}).ok());
  ASSERT_TRUE(a->EventRecord({9, 0}).ok());
  auto h = a->IpcGetEventHandle({9});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->handle.size(), 64u);
  ASSERT_TRUE(b->IpcOpenEventHandle({3, h->handle}).ok());
  EXPECT_TRUE(b->EventSynchronize({3}).ok());
  EXPECT_TRUE(b->StreamWaitEvent({0, 3, 0}).ok());
  EXPECT_EQ(b->IpcOpenEventHandle({3, h->handle}).status().code(), CudaError::kInvalidValue);
  Bytes forged(64);
  EXPECT_EQ(b->IpcOpenEventHandle({4, forged}).status().code(), CudaError::kInvalidValue);
  Bytes truncated(h->handle.begin(), h->handle.begin() + 10);
  EXPECT_EQ(b->IpcOpenEventHandle({4, truncated}).status().code(), CudaError::kInvalidValue);
  ASSERT_TRUE(b->EventDestroy({3}).ok());
  EXPECT_TRUE(b->Sync({}).ok());
}

}  // namespace
}  // namespace flyt::remote
