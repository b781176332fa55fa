// The front door of http::Server: slow and idle peers hold no worker, a peer over its cap is
// refused, a request must be complete within its deadline as a whole, and a well-behaved client
// is still served. Loopback only; 127.0.0.2 plays another host.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/http.h"
#include "common/unique_fd.h"

namespace flyt::http {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class FrontDoorTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options) {
    Configure(server_, options);
    server_.SetOverloadListener([this] { ++overloads_; });
    server_.Get("/hi", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hello", "text/plain");
    });
    server_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "text/plain");
    });
    auto port = Listen(server_, "127.0.0.1", 0, thread_);
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
  }
  void TearDown() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  // A raw connection from `from` (127.0.0.2: "another host").
  UniqueFd Connect(const char* from) const {
    UniqueFd fd(socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from, &src.sin_addr);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof(src)), 0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port_));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0);
    return fd;
  }

  // What arrives on `fd` within `wait` (until the peer closes or the wait ends); `closed` says
  // whether it closed.
  static std::string ReadFor(int fd, milliseconds wait, bool* closed = nullptr) {
    std::string got;
    const auto until = steady_clock::now() + wait;
    if (closed) *closed = false;
    while (steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<milliseconds>(until - steady_clock::now()).count();
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) break;
      char buf[4096];
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (closed) *closed = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

  // GET /hi from 127.0.0.1 with a 1 s limit; true when it answered "hello".
  bool Served() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(std::chrono::seconds(1));
    client.set_read_timeout(std::chrono::seconds(1));
    auto res = client.Get("/hi");
    return res && res->status == 200 && res->body == "hello";
  }

  static void Send(int fd, const std::string& s) {
    ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }

  ServerOptions Options() const {
    ServerOptions o;
    o.threads = 2;
    o.max_connections_per_peer = 8;
    o.max_connections = 64;
    o.request_deadline_seconds = 1;
    o.idle_timeout_seconds = 2;
    return o;
  }

  Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> overloads_{0};
};

TEST_F(FrontDoorTest, SlowHeaderPeersHoldNoWorker) {
  ServerOptions o = Options();
  o.request_deadline_seconds = 30;  // they stay for the whole test
  Start(o);
  // Four times as many slow peers as workers, each with half a request head.
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(Connect("127.0.0.2"));
    Send(slow.back().get(), "GET /hi HTTP/1.1\r\nHost: x\r\n");
  }
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_TRUE(Served());
  EXPECT_TRUE(Served());
  // The slow ones are still open (the clients' own closed as they went).
  for (int i = 0; i < 50 && server_.stats().connections_open != 8; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(server_.stats().connections_open, 8u);
}

TEST_F(FrontDoorTest, APeerOverItsCapIsRefusedOthersAreNot) {
  Start(Options());
  std::vector<UniqueFd> held;
  for (int i = 0; i < 8; ++i) held.push_back(Connect("127.0.0.2"));
  std::this_thread::sleep_for(milliseconds(100));
  UniqueFd over = Connect("127.0.0.2");
  bool closed = false;
  const std::string answer = ReadFor(over.get(), milliseconds(2000), &closed);
  EXPECT_NE(answer.find("HTTP/1.1 429"), std::string::npos) << answer;
  EXPECT_NE(answer.find("resource_exhausted"), std::string::npos) << answer;
  EXPECT_TRUE(closed);
  EXPECT_EQ(server_.stats().refused_per_peer, 1u);
  EXPECT_GE(overloads_.load(), 1);  // a refused connection: the server could not receive
  EXPECT_TRUE(Served());            // another address is not affected
  // A connection given back makes room.
  held.pop_back();
  std::this_thread::sleep_for(milliseconds(200));
  UniqueFd again = Connect("127.0.0.2");
  Send(again.get(), "GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(ReadFor(again.get(), milliseconds(2000)).find("hello"), std::string::npos);
}

TEST_F(FrontDoorTest, TheWholeHeadHasADeadlineNotEachRead) {
  Start(Options());  // deadline 1 s
  UniqueFd drip = Connect("127.0.0.2");
  const std::string head = "GET /hi HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'a');
  const auto started = steady_clock::now();
  bool closed = false;
  std::string answer;
  // One byte every 100 ms, for up to 3 s: each read comes well within any per-read timeout.
  for (size_t i = 0; i < head.size() && steady_clock::now() - started < std::chrono::seconds(3);
       ++i) {
    if (send(drip.get(), &head[i], 1, MSG_NOSIGNAL) != 1) break;
    answer += ReadFor(drip.get(), milliseconds(100), &closed);
    if (closed) break;
  }
  EXPECT_TRUE(closed) << "a dripping head was not cut";
  EXPECT_LT(steady_clock::now() - started, std::chrono::milliseconds(2500));
  EXPECT_NE(answer.find("HTTP/1.1 408"), std::string::npos) << answer;
  EXPECT_EQ(server_.stats().requests_timed_out, 1u);
  EXPECT_TRUE(Served());
}

TEST_F(FrontDoorTest, AWellBehavedClientIsServedWithKeepAliveBodiesAndContinue) {
  Start(Options());
  UniqueFd c = Connect("127.0.0.1");
  // Two requests on one connection, the second with a body; then a pipelined pair.
  Send(c.get(), "GET /hi HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(ReadFor(c.get(), milliseconds(500)).find("hello"), std::string::npos);
  Send(c.get(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde");
  EXPECT_NE(ReadFor(c.get(), milliseconds(500)).find("abcde"), std::string::npos);
  Send(c.get(),
       "GET /hi HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\n"
       "Content-Length: 3\r\n\r\nxyz");
  const std::string both = ReadFor(c.get(), milliseconds(800));
  EXPECT_NE(both.find("hello"), std::string::npos) << both;
  EXPECT_NE(both.find("xyz"), std::string::npos) << both;
  // Expect: 100-continue is answered before the body is sent.
  UniqueFd e = Connect("127.0.0.1");
  Send(e.get(),
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_NE(ReadFor(e.get(), milliseconds(500)).find("100 Continue"), std::string::npos);
  Send(e.get(), "body");
  const std::string answer = ReadFor(e.get(), milliseconds(500));
  EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("100 Continue"), std::string::npos) << answer;
  // A chunked body is refused: 411.
  UniqueFd chunked = Connect("127.0.0.1");
  Send(chunked.get(), "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_NE(ReadFor(chunked.get(), milliseconds(500)).find("HTTP/1.1 411"), std::string::npos);
  // A body over the limit: 413 before it is sent.
  UniqueFd big = Connect("127.0.0.1");
  Send(big.get(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n");
  EXPECT_NE(ReadFor(big.get(), milliseconds(500)).find("HTTP/1.1 413"), std::string::npos);
}

TEST_F(FrontDoorTest, AnIdleConnectionIsClosed) {
  Start(Options());  // idle timeout 2 s
  UniqueFd idle = Connect("127.0.0.2");
  bool closed = false;
  const auto started = steady_clock::now();
  EXPECT_EQ(ReadFor(idle.get(), milliseconds(4000), &closed), "");
  EXPECT_TRUE(closed);
  EXPECT_LT(steady_clock::now() - started, milliseconds(3500));
  EXPECT_EQ(server_.stats().idle_closed, 1u);
  EXPECT_NE(server_.MetricsText("flyt_test").find("flyt_test_http_connections_idle_closed_total 1"),
            std::string::npos);
}

// Reads from `fd` until `done(got)` holds or `wait` passes (or the peer closes).
std::string ReadUntil(int fd, const std::function<bool(const std::string&)>& done,
                      milliseconds wait) {
  std::string got;
  const auto until = steady_clock::now() + wait;
  while (!done(got) && steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string Get(const std::string& path, const std::string& token) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n\r\n";
}

// Every worker busy: the control plane still answers, through the priority lane.
TEST_F(FrontDoorTest, ThePriorityLaneAnswersWhileEveryWorkerIsBusy) {
  std::atomic<int> entered{0};
  std::atomic<bool> release{false};
  server_.Get("/block", [&](const httplib::Request&, httplib::Response& res) {
    ++entered;
    // Held until the test lets go (at most 20 s, so that a failing test still ends).
    for (int i = 0; i < 2000 && !release.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
    res.set_content("done", "text/plain");
  });
  server_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  server_.Post("/beat", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("beat", "text/plain");
  });
  // The daemon's own control plane: POST /beat besides /healthz and /metrics.
  server_.SetAdmissionPolicy(
      [](const RequestHead& head) {
        Admission a = DefaultAdmission(head);
        a.priority = a.priority || (head.method == "POST" && head.path == "/beat");
        return a;
      },
      {});
  Start(Options());  // 2 ordinary workers
  std::vector<std::thread> blockers;
  // Let go and join on every way out, a failed ASSERT too.
  struct Joiner {
    std::atomic<bool>& release;
    std::vector<std::thread>& threads;
    ~Joiner() {
      release = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{release, blockers};
  for (int i = 0; i < 2; ++i) {
    blockers.emplace_back([this] {
      httplib::Client client("127.0.0.1", port_);
      client.set_read_timeout(std::chrono::seconds(30));
      (void)client.Get("/block");
    });
  }
  for (int i = 0; i < 1000 && entered.load() < 2; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(entered.load(), 2) << "the ordinary workers did not both take a blocking request";
  {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(std::chrono::seconds(5));
    auto health = client.Get("/healthz?verbose=1");
    ASSERT_TRUE(health) << "/healthz was not answered while the workers were busy";
    EXPECT_EQ(health->body, "ok");
    auto beat = client.Post("/beat", "{}", "application/json");
    ASSERT_TRUE(beat) << "the daemon's priority route was not answered";
    EXPECT_EQ(beat->body, "beat");
  }
  EXPECT_EQ(entered.load(), 2);  // the blocked ones are still blocked
  release = true;
  for (auto& t : blockers) t.join();
  EXPECT_EQ(server_.stats().requests_priority, 2u);
  EXPECT_NE(server_.MetricsText("flyt_test").find("flyt_test_http_requests_priority_total 2"),
            std::string::npos);
}

// A token over its rate gets 429 with Retry-After on the epoll thread, its connection stays
// open, other tokens and unlimited ones are served; time (a FakeClock) refills the bucket.
TEST_F(FrontDoorTest, ATokenOverItsRateGets429WithRetryAfter) {
  FakeClock clock;
  server_.SetClock(clock);
  server_.SetAdmissionPolicy(
      [](const RequestHead& head) {
        Admission a = DefaultAdmission(head);
        if (head.bearer_token && *head.bearer_token == "node") return a;  // never limited
        a.limit = RateLimit{1.0, 2.0};
        a.limit_key = head.bearer_token ? "holder:" + std::string(*head.bearer_token)
                                        : "address:" + std::string(head.peer_ip);
        a.label = head.bearer_token ? "client" : "anonymous";
        return a;
      },
      {"client", "anonymous"});
  Start(Options());
  auto responses = [](size_t n) {
    return [n](const std::string& got) { return Count(got, "HTTP/1.1 ") >= n; };
  };
  UniqueFd c = Connect("127.0.0.1");
  // Three pipelined requests with one token: its burst of 2, then a refusal.
  Send(c.get(), Get("/hi", "alice") + Get("/hi", "alice") + Get("/hi", "alice"));
  std::string got = ReadUntil(c.get(), responses(3), milliseconds(5000));
  EXPECT_EQ(Count(got, "HTTP/1.1 200"), 2u) << got;
  ASSERT_EQ(Count(got, "HTTP/1.1 429 Too Many Requests"), 1u) << got;
  const std::string refusal = got.substr(got.find("HTTP/1.1 429"));
  EXPECT_NE(refusal.find("Retry-After: 1\r\n"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("\"code\":\"rate_limited\""), std::string::npos) << refusal;
  EXPECT_EQ(refusal.find("Connection: close"), std::string::npos) << refusal;
  // The same connection: another token is served, the node token is never limited.
  std::string more = Get("/hi", "bob");
  for (int i = 0; i < 10; ++i) more += Get("/hi", "node");
  Send(c.get(), more);
  got = ReadUntil(c.get(), responses(11), milliseconds(5000));
  EXPECT_EQ(Count(got, "HTTP/1.1 200"), 11u) << got;
  // Alice is still over, until a second has passed.
  Send(c.get(), Get("/hi", "alice"));
  got = ReadUntil(c.get(), responses(1), milliseconds(5000));
  EXPECT_NE(got.find("HTTP/1.1 429"), std::string::npos) << got;
  clock.Advance(std::chrono::seconds(1));
  Send(c.get(), Get("/hi", "alice"));
  got = ReadUntil(c.get(), responses(1), milliseconds(5000));
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  // Without a token: the address's bucket. Connection: close is honoured on a refusal.
  UniqueFd anon = Connect("127.0.0.2");
  const std::string plain = "GET /hi HTTP/1.1\r\nHost: x\r\n\r\n";
  Send(anon.get(), plain + plain + "GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  bool closed = false;
  got = ReadFor(anon.get(), milliseconds(3000), &closed);
  EXPECT_EQ(Count(got, "HTTP/1.1 200"), 2u) << got;
  EXPECT_NE(got.find("HTTP/1.1 429"), std::string::npos) << got;
  EXPECT_TRUE(closed);
  EXPECT_TRUE(Served());  // 127.0.0.1 without a token: a bucket of its own

  const Server::Stats s = server_.stats();
  EXPECT_EQ(s.requests_limited, 3u);
  EXPECT_EQ(s.limited_by_label.at("client"), 2u);
  EXPECT_EQ(s.limited_by_label.at("anonymous"), 1u);
  const std::string metrics = server_.MetricsText("flyt_test");
  EXPECT_NE(metrics.find("flyt_test_http_requests_limited_total{role=\"client\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("flyt_test_http_requests_limited_total{role=\"anonymous\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("flyt_test_http_requests_limited_total{role=\"other\"} 0"),
            std::string::npos);
}


// A second Authorization header could have the rate limit charge one token while the handlers
// authenticate another: such a request is refused before any handler runs.
TEST_F(FrontDoorTest, TwoAuthorizationHeadersAreRefused) {
  Start(Options());
  UniqueFd c = Connect("127.0.0.1");
  Send(c.get(),
       "GET /hi HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n"
       "Authorization: Bearer bob\r\n\r\n");
  const std::string got = ReadFor(c.get(), milliseconds(3000));
  EXPECT_NE(got.find("HTTP/1.1 400"), std::string::npos) << got;
  EXPECT_NE(got.find("more than one Authorization header"), std::string::npos) << got;
  EXPECT_EQ(got.find("hello"), std::string::npos) << got;
  EXPECT_TRUE(Served());
}

}  // namespace
}  // namespace flyt::http
