#include "kube/client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/json.h"
#include "kube/test_api_server.h"

namespace flyt::kube {
namespace {

using nlohmann::json;
using testing::FakeKubeApi;

using testing::TempDir;
using testing::WriteFile;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto api = FakeKubeApi::Start(dir_.path(), "gpu-node-1", "token-one");
    ASSERT_TRUE(api.ok()) << api.status().ToString();
    api_ = std::move(api).value();
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "token-one\n");
  }

  ClientOptions Options() const {
    ClientOptions o;
    o.api_server = api_->url();
    o.token_file = token_file_;
    o.ca_file = api_->ca_file();
    o.timeout = std::chrono::seconds(20);
    return o;
  }

  std::unique_ptr<Client> NewClient(const ClientOptions& o) {
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  std::string token_file_;
};

TEST(ParseApiServerTest, TakesHttpsHostAndPort) {
  auto s = ParseApiServer("https://10.96.0.1:443");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->host, "10.96.0.1");
  EXPECT_EQ(s->port, 443);
  s = ParseApiServer("https://[fd00::1]:6443/");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->host, "fd00::1");
  EXPECT_EQ(s->port, 6443);
  s = ParseApiServer("https://kubernetes.default.svc");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->host, "kubernetes.default.svc");
  EXPECT_EQ(s->port, 443);
}

TEST(ParseApiServerTest, RefusesAnythingElse) {
  for (const char* bad :
       {"http://10.0.0.1:443", "10.0.0.1:443", "https://", "https://h:0", "https://h:99999",
        "https://h/api", "https://user@h", "https://fd00::1:443"}) {
    EXPECT_FALSE(ParseApiServer(bad).ok()) << bad;
  }
  EXPECT_NE(ParseApiServer("http://h").status().message().find("https://"), std::string::npos);
}

TEST(ValidNodeNameTest, DnsSubdomains) {
  EXPECT_TRUE(ValidNodeName("gpu-node-1"));
  EXPECT_TRUE(ValidNodeName("ip-10-0-0-1.ec2.internal"));
  EXPECT_FALSE(ValidNodeName(""));
  EXPECT_FALSE(ValidNodeName("Gpu"));
  EXPECT_FALSE(ValidNodeName("-a"));
  EXPECT_FALSE(ValidNodeName("a/b"));
  EXPECT_FALSE(ValidNodeName("a?b"));
  EXPECT_FALSE(ValidNodeName(std::string(254, 'a')));
}

TEST_F(ClientTest, GetsTheNodeWithTheBearerToken) {
  api_->SetLabels({{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}});
  auto client = NewClient(Options());
  auto node = client->GetNode("gpu-node-1");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ((*node)["metadata"]["labels"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
  auto requests = api_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].path, "/api/v1/nodes/gpu-node-1");
  EXPECT_EQ(requests[0].authorization, "Bearer token-one");
}

TEST_F(ClientTest, MergePatchesAnnotations) {
  auto client = NewClient(Options());
  auto node = client->MergePatchNode(
      "gpu-node-1", {{"metadata", {{"annotations", {{"flyt.dev/gpu-0", "{\"v\":1}"}}}}}});
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ((*node)["metadata"]["annotations"]["flyt.dev/gpu-0"], "{\"v\":1}");
  auto requests = api_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "PATCH");
  EXPECT_EQ(requests[0].content_type, "application/merge-patch+json");
  EXPECT_TRUE(api_->violations().empty());
  EXPECT_EQ(api_->patch_count(), 1u);
}

TEST_F(ClientTest, ReadsTheTokenFileAgainForEachRequest) {
  auto client = NewClient(Options());
  ASSERT_TRUE(client->GetNode("gpu-node-1").ok());
  // The kubelet rotates the token: the file is rewritten and the server takes only the new one.
  api_->SetToken("token-two");
  WriteFile(token_file_, "token-two");
  auto node = client->GetNode("gpu-node-1");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(api_->requests().back().authorization, "Bearer token-two");
}

TEST_F(ClientTest, AStaleTokenIsUnauthorizedWithTheApisMessage) {
  api_->SetToken("token-two");
  auto client = NewClient(Options());
  auto node = client->GetNode("gpu-node-1");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "unauthorized");
  EXPECT_NE(node.status().message().find("HTTP 401 Unauthorized"), std::string::npos)
      << node.status().message();
}

TEST_F(ClientTest, EachRefusalHasItsReasonAndTheApisMessage) {
  auto client = NewClient(Options());
  const std::vector<std::pair<int, std::string>> cases = {
      {401, "unauthorized"}, {403, "forbidden"},    {404, "not_found"},
      {409, "conflict"},     {422, "invalid"},      {429, "throttled"},
      {500, "server_error"}, {503, "server_error"}, {400, "http_error"}};
  for (const auto& [code, reason] : cases) {
    api_->FailNext(code);
    auto r = client->MergePatchNode("gpu-node-1",
                                    {{"metadata", {{"annotations", {{"flyt.dev/gpu-0", "x"}}}}}});
    ASSERT_FALSE(r.ok()) << code;
    EXPECT_EQ(r.status().reason(), reason) << code;
    EXPECT_NE(r.status().message().find("HTTP " + std::to_string(code)), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("injected failure " + std::to_string(code)),
              std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(api_->patch_count(), 0u);
}

TEST_F(ClientTest, AServerSignedByAnotherCaIsATlsError) {
  ClientOptions o = Options();
  o.ca_file = api_->wrong_ca_file();
  auto client = NewClient(o);
  auto node = client->GetNode("gpu-node-1");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "tls") << node.status().ToString();
  EXPECT_TRUE(api_->requests().empty()) << "the request must not reach an unverified server";
}

TEST_F(ClientTest, AMissingCaFileIsATlsError) {
  ClientOptions o = Options();
  o.ca_file = dir_.path() + "/absent.crt";
  auto node = NewClient(o)->GetNode("gpu-node-1");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "tls") << node.status().ToString();
}

TEST_F(ClientTest, AMissingOrEmptyTokenFileIsATokenError) {
  ClientOptions o = Options();
  o.token_file = dir_.path() + "/absent-token";
  auto client = NewClient(o);
  auto node = client->GetNode("gpu-node-1");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "token");
  WriteFile(token_file_, " \n");
  node = NewClient(Options())->GetNode("gpu-node-1");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "token");
  EXPECT_TRUE(api_->requests().empty());
}

TEST_F(ClientTest, AnApiThatDoesNotAnswerIsATimeout) {
  ClientOptions o = Options();
  o.timeout = std::chrono::milliseconds(300);
  api_->HangNext();
  auto node = NewClient(o)->GetNode("gpu-node-1");
  api_->Release();
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "timeout") << node.status().ToString();
}

TEST_F(ClientTest, ARefusedConnectionIsAConnectionError) {
  // A port that was free a moment ago and has no listener now.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  ClientOptions o = Options();
  o.api_server = "https://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto node = NewClient(o)->GetNode("gpu-node-1");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "connection") << node.status().ToString();
}

TEST_F(ClientTest, CancelEndsTheRequestInFlightAndLaterOnes) {
  api_->HangNext();
  auto client = NewClient(Options());
  Result<json> node = Internal("not run");
  std::thread t([&] { node = client->GetNode("gpu-node-1"); });
  while (api_->requests().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  client->Cancel();
  t.join();
  api_->Release();
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().reason(), "cancelled") << node.status().ToString();
  auto again = client->GetNode("gpu-node-1");
  EXPECT_EQ(again.status().reason(), "cancelled");
}

TEST_F(ClientTest, RefusesABadNodeNameWithoutARequest) {
  auto node = NewClient(Options())->GetNode("../../api/v1/secrets");
  EXPECT_FALSE(node.ok());
  EXPECT_TRUE(api_->requests().empty());
}

TEST(ClientCreateTest, ChecksItsOptions) {
  ClientOptions o;
  o.api_server = "http://10.0.0.1";
  EXPECT_FALSE(Client::Create(o).ok());
  o.api_server = "https://10.0.0.1";
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_FALSE(Client::Create(o).ok());
  o.timeout = std::chrono::seconds(1);
  EXPECT_TRUE(Client::Create(o).ok());
}

}  // namespace
}  // namespace flyt::kube
