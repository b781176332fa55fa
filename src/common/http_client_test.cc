// JsonClient against real loopback servers: it never follows a redirect (the bearer token must go
// to the one host it was given for) and refuses an answer over its size limit.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "common/http.h"

namespace flyt::http {
namespace {

// An httplib server on 127.0.0.1, any free port, stopped and joined on destruction.
class TestServer {
 public:
  explicit TestServer(const std::function<void(httplib::Server&)>& routes) {
    routes(server_);  // before it serves: handlers are not to be added while it runs
    auto port = Listen(server_, "127.0.0.1", 0, thread_);
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    port_ = port.ok() ? *port : 0;
  }
  ~TestServer() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(JsonClientTest, ARedirectIsNotFollowedAndTheTokenGoesNowhereElse) {
  std::atomic<int> elsewhere{0};
  TestServer other([&](httplib::Server& s) {
    s.Get(".*", [&](const httplib::Request&, httplib::Response& res) {
      ++elsewhere;
      res.set_content("{}", "application/json");
    });
  });
  std::string token_seen;
  const std::string target = other.url() + "/stolen";
  TestServer redirecting([&](httplib::Server& s) {
    auto redirect = [&](const httplib::Request& req, httplib::Response& res) {
      token_seen = req.get_header_value("Authorization");
      res.status = 302;
      res.set_header("Location", target);
      res.set_content(R"({"looks": "fine"})", "application/json");
    };
    s.Get(".*", redirect);
    s.Post(".*", redirect);
  });
  auto client = JsonClient::Connect(redirecting.url(), "secret-token-0000", "the node");
  ASSERT_TRUE(client.ok());
  auto r = (*client)->Get("/api/v1/gpus/0/history");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("redirect"), std::string::npos) << r.status().message();
  EXPECT_EQ(token_seen, "Bearer secret-token-0000");
  EXPECT_EQ(elsewhere.load(), 0);
  EXPECT_FALSE((*client)->Post("/x", {{"a", 1}}).ok());
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(JsonClientTest, AnAnswerOverTheLimitIsRefused) {
  TestServer big([](httplib::Server& s) {
    s.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("[" + std::string(3 << 20, ' ') + "]", "application/json");
    });
    s.Get("/small", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"ok": true})", "application/json");
    });
    s.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "application/json");
    });
  });
  auto client = JsonClient::Connect(big.url(), "", "the server");
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->Get("/big").ok());  // the default limit is far above
  (*client)->SetMaxResponseBytes(1 << 20);
  auto r = (*client)->Get("/big");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("more than 1048576 bytes"), std::string::npos)
      << r.status().message();
  auto small = (*client)->Get("/small");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ((*small)["ok"], true);
  auto echo = (*client)->Post("/echo", {{"a", 1}});
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ((*echo)["a"], 1);
}

}  // namespace
}  // namespace flyt::http
