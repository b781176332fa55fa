// The client against a server of an older protocol version: a call that version lacks is refused
// in the client (cudaErrorNotSupported naming the versions) and never sent, since the older
// server would take its unknown call id as a malformed message and close the connection.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "common/unique_fd.h"
#include "remote_client/client.h"
#include "remote/protocol.h"

namespace flyt::remote {
namespace {

// Reads one whole frame from `fd`; false on end of stream.
bool ReadFrame(int fd, FrameHeader& header, Bytes& payload) {
  std::byte raw[kFrameHeaderBytes];
  if (::recv(fd, raw, sizeof raw, MSG_WAITALL) != static_cast<ssize_t>(sizeof raw)) return false;
  Result<FrameHeader> h = DecodeFrameHeader(raw);
  if (!h.ok()) return false;
  header = *h;
  payload.resize(header.payload_bytes);
  return payload.empty() || ::recv(fd, payload.data(), payload.size(), MSG_WAITALL) ==
                                static_cast<ssize_t>(payload.size());
}

TEST(ClientVersionTest, ACallTheServersVersionLacksIsRefusedAndNeverSent) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  UniqueFd server(fds[1]);
  std::thread fake([&] {
    FrameHeader header;
    Bytes payload;
    ASSERT_TRUE(ReadFrame(server.get(), header, payload));
    ASSERT_EQ(header.kind, FrameKind::kHello);
    HelloReply reply;
    reply.magic = kHelloMagic;
    reply.version = 2;  // before issue 17's calls
    reply.capabilities = kAllCapabilities;
    reply.max_frame_payload = kMaxFramePayload;
    reply.client_id = 1;
    reply.backend = "sim";
    reply.device_count = 1;
    Bytes out;
    AppendFrame(out, FrameKind::kHelloReply, CallId::kNone, header.seq, reply);
    ASSERT_EQ(::send(server.get(), out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  });
  ClientOptions options;
  options.label = "client_version_test";
  auto conn = Connection::OpenFd(UniqueFd(fds[0]), options);
  fake.join();
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_EQ((*conn)->server().version, 2);

  CudaStatus launch = (*conn)->GraphLaunch({1, 0});
  EXPECT_EQ(launch.code(), CudaError::kNotSupported);
  EXPECT_NE(launch.message().find("GraphLaunch needs protocol version 3"), std::string::npos)
      << launch.message();
  CudaResult<MallocManagedReply> managed = (*conn)->MallocManaged({});
  EXPECT_EQ(managed.status().code(), CudaError::kNotSupported);
  CudaResult<IpcGetMemHandleReply> ipc = (*conn)->IpcGetMemHandle({});
  EXPECT_EQ(ipc.status().code(), CudaError::kNotSupported);
  EXPECT_NE(ipc.status().message().find("IpcGetMemHandle needs protocol version 4"),
            std::string::npos)
      << ipc.status().message();
  ASSERT_TRUE((*conn)->Flush().ok());
  // Nothing reached the server.
  std::byte byte;
  EXPECT_EQ(::recv(server.get(), &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

}  // namespace
}  // namespace flyt::remote
