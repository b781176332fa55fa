#include "common/http_router.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "common/http.h"

namespace flyt::http {
namespace {

using nlohmann::json;

enum class Access { kPublic, kUser, kAdmin };

struct Caller {
  std::string name;
  bool admin = false;
};

// A token check of the kind a daemon supplies: the router itself knows nothing of tokens.
Result<Caller> Check(const httplib::Request& req, const Access& access) {
  if (access == Access::kPublic) return Caller{"anonymous"};
  const std::string token = BearerToken(req).value_or("");
  Caller caller;
  if (token == "user-token") {
    caller = {"alice", false};
  } else if (token == "admin-token") {
    caller = {"root", true};
  } else {
    return Unauthenticated("missing or unknown bearer token");
  }
  if (access == Access::kAdmin && !caller.admin) {
    return PermissionDenied(caller.name + " may not " + req.method + " " + req.path);
  }
  return caller;
}

// A real server on 127.0.0.1 (any free port) that serves `router`.
class Served {
 public:
  explicit Served(const Router<Access, Caller>& router) {
    Configure(server_, {});
    router.Install(server_);
    auto port = Listen(server_, "127.0.0.1", 0, thread_);
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    port_ = port.ok() ? *port : 0;
  }
  ~Served() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  httplib::Client Client(const std::string& token = "") const {
    httplib::Client c("127.0.0.1", port_);
    if (!token.empty()) c.set_bearer_token_auth(token);
    return c;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

void AddRoutes(Router<Access, Caller>& router) {
  router.Add(
      "GET", "/healthz", Access::kPublic,
      [](const httplib::Request&, httplib::Response& res, const Caller& who, const PathParams&) {
        SendJson(res, 200, {{"caller", who.name}});
      });
  const std::string part = "/items/([a-z]+)/parts/([0-9]{1,4})";
  router.Add(
      "GET", part, Access::kUser,
      [](const httplib::Request&, httplib::Response& res, const Caller& who, const PathParams& p) {
        SendJson(res, 200,
                 {{"caller", who.name},
                  {"item", p[1]},
                  {"part", p[2]},
                  {"path", p[0]},
                  {"beyond", p[3]}});
      });
  router.Add(
      "DELETE", part, Access::kAdmin,
      [](const httplib::Request&, httplib::Response& res, const Caller& who, const PathParams& p) {
        SendJson(res, 200, {{"deleted", p[1] + "/" + p[2]}, {"by", who.name}});
      });
  router.Add(
      "POST", "/items", Access::kUser,
      [](const httplib::Request& req, httplib::Response& res, const Caller&, const PathParams&) {
        SendJson(res, 201, {{"body", req.body}});
      });
}

json Body(const httplib::Result& r) { return json::parse(r->body); }

// Sends `request` as it is on a new connection and returns the status line of the answer.
std::string RawStatusLine(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "socket failed";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    char buf[512];
    while (answer.find("\r\n") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      answer.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return answer.substr(0, answer.find("\r\n"));
}

class RouterTest : public ::testing::Test {
 protected:
  RouterTest() : router_(Check) { AddRoutes(router_); }
  Router<Access, Caller> router_;
};

TEST_F(RouterTest, UnknownPathIs404NotFound) {
  Served served(router_);
  auto r = served.Client("user-token").Get("/nothing/here");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Body(r)["code"], "not_found");
  EXPECT_EQ(Body(r)["error"], "no such endpoint: /nothing/here (see docs/api.md)");
  // A pattern matches the whole path, never a prefix of it.
  EXPECT_EQ(served.Client("user-token").Get("/items/abc/parts/1/more")->status, 404);
  EXPECT_EQ(served.Client("user-token").Get("/items/ABC/parts/1")->status, 404);
}

TEST_F(RouterTest, WrongMethodIs405WithAllow) {
  Served served(router_);
  auto r = served.Client("admin-token").Put("/items/abc/parts/1", "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, DELETE");
  EXPECT_EQ(Body(r)["code"], "method_not_allowed");
  EXPECT_EQ(Body(r)["error"],
            "method PUT is not allowed on /items/abc/parts/1 (allowed: GET, DELETE)");
  // The method is checked before the token: the path exists whoever asks.
  auto anonymous = served.Client().Post("/healthz", "", "application/json");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 405);
  EXPECT_EQ(anonymous->get_header_value("Allow"), "GET");
}

TEST_F(RouterTest, NoTokenIs401Unauthenticated) {
  Served served(router_);
  for (const std::string token : {"", "not-a-token"}) {
    auto r = served.Client(token).Get("/items/abc/parts/1");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << token;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
    EXPECT_EQ(Body(r)["code"], "unauthenticated");
    EXPECT_EQ(Body(r)["error"], "missing or unknown bearer token");
  }
  // A public route needs none.
  auto open = served.Client().Get("/healthz");
  ASSERT_TRUE(open);
  EXPECT_EQ(open->status, 200);
  EXPECT_EQ(Body(open)["caller"], "anonymous");
}

TEST_F(RouterTest, AccessTheCheckRefusesIs403PermissionDenied) {
  Served served(router_);
  auto r = served.Client("user-token").Delete("/items/abc/parts/1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(Body(r)["code"], "permission_denied");
  EXPECT_EQ(Body(r)["error"], "alice may not DELETE /items/abc/parts/1");
  auto admin = served.Client("admin-token").Delete("/items/abc/parts/1");
  ASSERT_TRUE(admin);
  EXPECT_EQ(admin->status, 200);
  EXPECT_EQ(Body(admin)["by"], "root");
}

TEST_F(RouterTest, PathParamsAndTheCallerReachTheHandler) {
  Served served(router_);
  auto r = served.Client("user-token").Get("/items/abc/parts/42");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Body(r), (json{{"caller", "alice"},
                           {"item", "abc"},
                           {"part", "42"},
                           {"path", "/items/abc/parts/42"},
                           {"beyond", ""}}));
  // HEAD is served by the GET route (no body comes back).
  auto head = served.Client("user-token").Head("/items/abc/parts/42");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
}

TEST_F(RouterTest, TheBodyIsReadBeforeAnyAnswer) {
  Served served(router_);
  httplib::Client c = served.Client("user-token");
  c.set_keep_alive(true);
  // A refused request with a body, then another on the same connection: the first body must not
  // be taken for the second request.
  auto refused =
      c.Post("/healthz", R"({"GET /items/abc/parts/1 HTTP/1.1": 1})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 405);
  auto r = c.Post("/items", R"({"a": 1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(Body(r)["body"], R"({"a": 1})");
}

// A request without Content-Length has no body: it is served at once, not held until the
// server's read timeout and then refused as malformed.
TEST_F(RouterTest, ARequestWithoutABodyIsServedAsItIs) {
  Served served(router_);
  EXPECT_EQ(RawStatusLine(served.port(), "PUT /items/abc/parts/1 HTTP/1.1\r\nHost: x\r\n\r\n"),
            "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(RawStatusLine(served.port(), "POST /items HTTP/1.1\r\nHost: x\r\n\r\n"),
            "HTTP/1.1 401 Unauthorized");
  EXPECT_EQ(RawStatusLine(served.port(),
                          "POST /items HTTP/1.1\r\nHost: x\r\n"
                          "Authorization: Bearer user-token\r\n\r\n"),
            "HTTP/1.1 201 Created");
}

TEST_F(RouterTest, ACheckThatFailsOtherwiseAnswersWithItsStatus) {
  Router<Access, Caller> router([](const httplib::Request&, const Access&) -> Result<Caller> {
    return Unavailable("the token store is unavailable");
  });
  AddRoutes(router);
  Served served(router);
  auto r = served.Client("user-token").Get("/items/abc/parts/1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(Body(r)["code"], "unavailable");
}

TEST(RouterUnmatchedAccessTest, WithoutCredentialsNoPathIsRevealed) {
  Router<Access, Caller> router(Check, Access::kUser);
  AddRoutes(router);
  Served served(router);
  auto unknown = served.Client().Get("/nothing/here");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);
  EXPECT_EQ(Body(unknown)["code"], "unauthenticated");
  auto wrong_method = served.Client().Put("/items/abc/parts/1", "{}", "application/json");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 401);
  // With a token: 404 and 405 as usual.
  EXPECT_EQ(served.Client("user-token").Get("/nothing/here")->status, 404);
  EXPECT_EQ(served.Client("user-token").Put("/items/abc/parts/1", "{}", "application/json")->status,
            405);
  // A public route is still public.
  EXPECT_EQ(served.Client().Get("/healthz")->status, 200);
}

TEST(RouteTableTest, FindListsEachMethodOnceAndTakesTheFirstMatch) {
  Router<Access, Caller> router(Check);
  auto noop = [](const httplib::Request&, httplib::Response&, const Caller&, const PathParams&) {};
  router.Add("GET", "/a/([0-9]+)", Access::kUser, noop);
  router.Add("GET", "/a/(.*)", Access::kUser, noop);
  router.Add("POST", "/a/(.*)", Access::kUser, noop);
  auto found = router.Find("HEAD", "/a/7");
  ASSERT_TRUE(found.route.has_value());
  EXPECT_EQ(*found.route, 0u);
  EXPECT_EQ(found.allow, "GET, POST");
  EXPECT_EQ(found.params[1], "7");
  auto miss = router.Find("DELETE", "/a/x");
  EXPECT_FALSE(miss.route.has_value());
  EXPECT_EQ(miss.allow, "GET, POST");
  EXPECT_EQ(router.Find("GET", "/b").allow, "");
}

// JsonClient hands the server's error code on as the Status's reason (flytctl's exit codes).
TEST_F(RouterTest, JsonClientKeepsTheErrorCodeAsTheReason) {
  Served served(router_);
  auto client = JsonClient::Connect("127.0.0.1:" + std::to_string(served.port()), "user-token");
  ASSERT_TRUE(client.ok());
  auto missing = (*client)->Get("/nothing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().reason(), "not_found");
  auto refused = (*client)->Delete("/items/abc/parts/1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.status().reason(), "permission_denied");
}

}  // namespace
}  // namespace flyt::http
