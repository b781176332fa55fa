#include "node/kube_annotations.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "kube/test_api_server.h"
#include "profile/json.h"

namespace flyt::node {
namespace {

using kube::testing::FakeKubeApi;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr uint64_t kGiB = uint64_t{1} << 30;

using kube::testing::TempDir;
using kube::testing::WriteFile;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

profile::GpuProfile Gpu(uint32_t index, profile::State state, double util_p95, uint64_t peak_bytes,
                        uint64_t total_bytes = 80 * kGiB) {
  profile::GpuProfile p;
  p.index = index;
  p.uuid = "GPU-0000000" + std::to_string(index);
  p.name = "NVIDIA H100 80GB HBM3";
  p.state = state;
  p.state_since = std::chrono::system_clock::time_point(std::chrono::seconds(1767225600));
  profile::Window w;
  w.name = "15m";
  w.length = 900s;
  w.util_percent = profile::Quantiles{util_p95 / 2, util_p95, util_p95, 900};
  p.windows = {w};
  p.memory.total_bytes = total_bytes;
  p.memory.peak_used_bytes = peak_bytes;
  p.memory.headroom_bytes = total_bytes - peak_bytes;
  if (state == profile::State::kCyclic) {
    p.cycle = profile::Cycle{};
    p.cycle->period_s = 12.0;
    p.cycle->confidence = 0.9;
    p.cycle->method = "autocorrelation";
  }
  p.processes = {profile::ProcessUse{4242, "python3", "alice", 20 * kGiB}};
  return p;
}

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto api = FakeKubeApi::Start(dir_.path(), "gpu-node-1", "token-one");
    ASSERT_TRUE(api.ok()) << api.status().ToString();
    api_ = std::move(api).value();
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "token-one\n");
    api_->SetLabels({{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                     {"nvidia.com/gpu.memory", "81559"},
                     {"nvidia.com/gpu.count", "2"},
                     {"kubernetes.io/hostname", "gpu-node-1"}});
    SetProfiles(
        {Gpu(0, profile::State::kSteady, 50, 20 * kGiB), Gpu(1, profile::State::kIdle, 0, 0)});
    log_sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    spdlog::default_logger()->sinks().push_back(log_sink_);
  }
  void TearDown() override {
    publisher_.reset();
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), log_sink_), sinks.end());
  }

  KubeAnnotationOptions Options() const {
    KubeAnnotationOptions o;
    o.node_name = "gpu-node-1";
    o.client.api_server = api_->url();
    o.client.token_file = token_file_;
    o.client.ca_file = api_->ca_file();
    o.client.timeout = 20s;
    return o;
  }

  void Create(const KubeAnnotationOptions& o) {
    auto p = KubeAnnotationPublisher::Create(
        o,
        [this] {
          MutexLock lock(mu_);
          return profiles_;
        },
        clock_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    publisher_ = std::move(p).value();
  }
  void Create() { Create(Options()); }

  void SetProfiles(std::vector<profile::GpuProfile> profiles) {
    MutexLock lock(mu_);
    profiles_ = std::move(profiles);
  }

  std::vector<FakeKubeApi::Request> Patches() const {
    std::vector<FakeKubeApi::Request> out;
    for (auto& r : api_->requests()) {
      if (r.method == "PATCH") out.push_back(r);
    }
    return out;
  }
  json LastPatchAnnotations() const {
    auto patches = Patches();
    if (patches.empty()) return json();
    auto body = ParseJson(patches.back().body, "patch");
    return body.ok() ? (*body)["metadata"]["annotations"] : json();
  }
  json NodeAnnotation(const std::string& key) const {
    json all = api_->annotations();
    if (!all.contains(key)) return json();
    auto parsed = ParseJson(all[key].get<std::string>(), key);
    return parsed.ok() ? *parsed : json();
  }

  TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  std::string token_file_;
  FakeClock clock_;
  Mutex mu_;
  std::vector<profile::GpuProfile> profiles_ FLYT_GUARDED_BY(mu_);
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_sink_;
  std::unique_ptr<KubeAnnotationPublisher> publisher_;
};

TEST_F(PublisherTest, ReadsTheNodeThenAnnotatesEachGpu) {
  Create();
  publisher_->RunOnce();
  auto requests = api_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[1].method, "PATCH");
  EXPECT_EQ(requests[1].path, "/api/v1/nodes/gpu-node-1");
  EXPECT_EQ(requests[1].content_type, "application/merge-patch+json");
  EXPECT_EQ(requests[1].authorization, "Bearer token-one");
  EXPECT_TRUE(api_->violations().empty()) << api_->violations().front();
  // The node holds exactly the compact profile of each GPU, and the NFD labels are not copied.
  MutexLock lock(mu_);
  EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-0"), profile::AnnotationJson(profiles_[0]));
  EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-1"), profile::AnnotationJson(profiles_[1]));
  EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-0")["state"], "steady");
  EXPECT_EQ(requests[1].body.find("nvidia.com/"), std::string::npos);
  // The labels are in the status for GET /api/v1/kubernetes.
  json status = publisher_->StatusJson();
  EXPECT_EQ(status["state"], "ok");
  EXPECT_EQ(status["labels"], json({{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                                    {"nvidia.com/gpu.memory", "81559"},
                                    {"nvidia.com/gpu.count", "2"}}));
  EXPECT_EQ(status["annotations"]["flyt.dev/gpu-1"]["state"], "idle");
  EXPECT_EQ(status["patches_total"], 1);
  EXPECT_TRUE(status["pending"].empty());
}

TEST_F(PublisherTest, WritesOnlyWhenAStateChangesOrAValuePassesItsThreshold) {
  Create();
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 1u);
  clock_.Advance(60s);
  publisher_->RunOnce();
  EXPECT_EQ(api_->patch_count(), 1u) << "nothing changed";
  // util p95 50 -> 55 -> 59: under the 10-point threshold from what the node holds.
  for (double util : {55.0, 59.0}) {
    SetProfiles(
        {Gpu(0, profile::State::kSteady, util, 20 * kGiB), Gpu(1, profile::State::kIdle, 0, 0)});
    clock_.Advance(60s);
    publisher_->RunOnce();
  }
  EXPECT_EQ(api_->patch_count(), 1u);
  // 61: 11 points from the 50 the node holds, though only 2 from the last sample.
  SetProfiles(
      {Gpu(0, profile::State::kSteady, 61, 20 * kGiB), Gpu(1, profile::State::kIdle, 0, 0)});
  clock_.Advance(60s);
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 2u);
  json sent = LastPatchAnnotations();
  EXPECT_EQ(sent.size(), 1u) << sent.dump() << ": only the key that changed is sent";
  EXPECT_TRUE(sent.contains("flyt.dev/gpu-0"));
  EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-0")["util_p95"], 61);
  // A state change is always written.
  SetProfiles(
      {Gpu(0, profile::State::kSteady, 61, 20 * kGiB), Gpu(1, profile::State::kBursty, 0, 0)});
  clock_.Advance(60s);
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 3u);
  EXPECT_EQ(LastPatchAnnotations().size(), 1u);
  EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-1")["state"], "bursty");
  EXPECT_TRUE(api_->violations().empty());
}

TEST(AnnotationMovedTest, Thresholds) {
  KubeAnnotationOptions o;  // 10 points, 5 % of memory, 10 % of the period
  auto ann = [](double util, uint64_t peak, double period) {
    auto p = Gpu(0, profile::State::kCyclic, util, peak);
    p.cycle->period_s = period;
    return profile::AnnotationJson(p);
  };
  const json base = ann(50, 40 * kGiB, 12.0);
  std::string why;
  EXPECT_FALSE(AnnotationMoved(base, base, o));
  EXPECT_FALSE(AnnotationMoved(base, ann(59.9, 40 * kGiB, 12.0), o));
  EXPECT_TRUE(AnnotationMoved(base, ann(60, 40 * kGiB, 12.0), o, &why));
  EXPECT_EQ(why, "util_p95");
  EXPECT_TRUE(AnnotationMoved(base, ann(40, 40 * kGiB, 12.0), o));
  // 5 % of 80 GiB is 4 GiB (peak and headroom move together).
  EXPECT_FALSE(AnnotationMoved(base, ann(50, 43 * kGiB, 12.0), o));
  EXPECT_TRUE(AnnotationMoved(base, ann(50, 44 * kGiB, 12.0), o, &why));
  EXPECT_EQ(why, "memory_peak_bytes");
  // 10 % of 12 s is 1.2 s.
  EXPECT_FALSE(AnnotationMoved(base, ann(50, 40 * kGiB, 13.0), o));
  EXPECT_TRUE(AnnotationMoved(base, ann(50, 40 * kGiB, 13.5), o, &why));
  EXPECT_EQ(why, "period_s");
  // A state, a new process, or a value that appears or disappears.
  EXPECT_TRUE(AnnotationMoved(
      base, profile::AnnotationJson(Gpu(0, profile::State::kSteady, 50, 40 * kGiB)), o, &why));
  EXPECT_EQ(why, "state \"cyclic\" -> \"steady\"");
  auto p = Gpu(0, profile::State::kCyclic, 50, 40 * kGiB);
  p.cycle->period_s = 12.0;
  p.processes.push_back(profile::ProcessUse{77, "sleep", "bob", 1});
  EXPECT_TRUE(AnnotationMoved(base, profile::AnnotationJson(p), o, &why));
  EXPECT_EQ(why, "processes");
  json no_util = base;
  no_util["util_p95"] = nullptr;
  EXPECT_TRUE(AnnotationMoved(base, no_util, o));
  EXPECT_TRUE(AnnotationMoved(json("garbage"), base, o));
  // Other keys (confidence, since) never cause a write on their own.
  json other = base;
  other["confidence"] = 0.1;
  other["since"] = "2026-02-01T00:00:00.000Z";
  EXPECT_FALSE(AnnotationMoved(base, other, o));
}

TEST_F(PublisherTest, AStateChangeWaitsAtMostMinInterval) {
  Create();
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 1u);
  SetProfiles({Gpu(0, profile::State::kIdle, 0, 0), Gpu(1, profile::State::kIdle, 0, 0)});
  clock_.Advance(5s);
  publisher_->RunOnce();
  EXPECT_EQ(api_->patch_count(), 1u) << "within min_interval (30 s) of the last patch";
  EXPECT_EQ(publisher_->StatusJson()["pending"], json({"flyt.dev/gpu-0"}));
  clock_.Advance(24s);
  publisher_->RunOnce();
  EXPECT_EQ(api_->patch_count(), 1u);
  clock_.Advance(1s);  // 30 s after the last patch
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 2u);
  EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-0")["state"], "idle");
  EXPECT_TRUE(publisher_->StatusJson()["pending"].empty());
}

TEST_F(PublisherTest, RemovesTheKeysOfGpusThatAreGoneWithNull) {
  // Left over from an earlier run on a node with more GPUs; keys of others stay untouched.
  api_->SetAnnotations({{"flyt.dev/gpu-7", "{\"v\":1,\"state\":\"idle\"}"},
                        {"flyt.dev/owner", "team-a"},
                        {"example.com/note", "keep"}});
  Create();
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 1u);
  json sent = LastPatchAnnotations();
  EXPECT_TRUE(sent["flyt.dev/gpu-7"].is_null());
  EXPECT_FALSE(sent.contains("flyt.dev/owner"));
  json node = api_->annotations();
  EXPECT_FALSE(node.contains("flyt.dev/gpu-7"));
  EXPECT_EQ(node["flyt.dev/owner"], "team-a");
  EXPECT_EQ(node["example.com/note"], "keep");
  // GPU 1 falls off the node's list.
  SetProfiles({Gpu(0, profile::State::kSteady, 50, 20 * kGiB)});
  clock_.Advance(30s);
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 2u);
  EXPECT_EQ(LastPatchAnnotations(), json({{"flyt.dev/gpu-1", nullptr}}));
  EXPECT_FALSE(api_->annotations().contains("flyt.dev/gpu-1"));
  EXPECT_TRUE(api_->annotations().contains("flyt.dev/gpu-0"));
  EXPECT_TRUE(api_->violations().empty());
}

TEST_F(PublisherTest, UsesTheRotatedTokenOnTheNextRequest) {
  Create();
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 1u);
  api_->SetToken("token-two");
  WriteFile(token_file_, "token-two\n");
  SetProfiles({Gpu(0, profile::State::kIdle, 0, 0), Gpu(1, profile::State::kIdle, 0, 0)});
  clock_.Advance(30s);
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 2u);
  EXPECT_EQ(Patches().back().authorization, "Bearer token-two");
  EXPECT_EQ(publisher_->stats().patch_failures.size(), 0u);
}

TEST_F(PublisherTest, EachFailureKindIsLoggedOnceCountedAndRetriedWithBackoff) {
  Create();
  publisher_->RunOnce();
  ASSERT_EQ(api_->patch_count(), 1u);
  const std::vector<std::pair<int, std::string>> kinds = {
      {401, "unauthorized"}, {403, "forbidden"},    {404, "not_found"},   {409, "conflict"},
      {422, "invalid"},      {500, "server_error"}, {503, "server_error"}};
  profile::State state = profile::State::kIdle;
  for (const auto& [code, reason] : kinds) {
    log_.str("");
    state = state == profile::State::kIdle ? profile::State::kBursty : profile::State::kIdle;
    SetProfiles({Gpu(0, state, 0, 0), Gpu(1, profile::State::kIdle, 0, 0)});
    clock_.Advance(30s);
    api_->FailNext(code, 3);
    const auto before = api_->requests().size();
    // Three failures, each retried only after its backoff: 1 s, 2 s, 4 s.
    std::vector<std::chrono::milliseconds> backoffs;
    for (int i = 0; i < 3; ++i) {
      publisher_->RunOnce();
      backoffs.push_back(publisher_->stats().backoff);
      // While backing off, a round sends nothing (and returns at once).
      publisher_->RunOnce();
      EXPECT_EQ(api_->requests().size(), before + i + 1) << code;
      clock_.Advance(publisher_->stats().backoff);
    }
    EXPECT_EQ(backoffs, (std::vector<std::chrono::milliseconds>{1s, 2s, 4s})) << code;
    json status = publisher_->StatusJson();
    EXPECT_EQ(status["state"], "failing");
    EXPECT_EQ(status["last_error"]["reason"], reason);
    EXPECT_EQ(status["pending"], json({"flyt.dev/gpu-0"}));
    // Logged once, with the status and the API's message.
    const std::string log = log_.str();
    EXPECT_EQ(Count(log, "failed (" + reason + ")"), 1u) << log;
    EXPECT_NE(log.find("HTTP " + std::to_string(code)), std::string::npos) << log;
    EXPECT_NE(log.find("injected failure " + std::to_string(code)), std::string::npos) << log;
    // Then the API takes it: written, back to ok, the backoff reset.
    publisher_->RunOnce();
    EXPECT_EQ(NodeAnnotation("flyt.dev/gpu-0")["state"], profile::StateName(state)) << code;
    EXPECT_EQ(publisher_->stats().backoff, 0ms);
    EXPECT_EQ(publisher_->StatusJson()["state"], "ok");
    EXPECT_NE(log_.str().find("again, after 3 failed requests"), std::string::npos) << log_.str();
  }
  auto stats = publisher_->stats();
  EXPECT_EQ(stats.patch_failures["forbidden"], 3u);
  EXPECT_EQ(stats.patch_failures["server_error"], 6u);
  EXPECT_EQ(stats.patch_failures["invalid"], 3u);
  const std::string metrics = publisher_->MetricsText();
  EXPECT_NE(metrics.find("flyt_kubernetes_patch_failures_total{reason=\"forbidden\"} 3\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("flyt_kubernetes_patch_failures_total{reason=\"tls\"} 0\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("flyt_kubernetes_patches_total 8\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("flyt_kubernetes_up 1\n"), std::string::npos);
  EXPECT_TRUE(api_->violations().empty());
}

TEST_F(PublisherTest, TheBackoffStopsAtFiveMinutes) {
  Create();
  api_->FailNext(503, 20);
  std::chrono::milliseconds last{0};
  for (int i = 0; i < 20; ++i) {
    publisher_->RunOnce();
    last = publisher_->stats().backoff;
    clock_.Advance(last);
  }
  EXPECT_EQ(last, 300s);
  EXPECT_EQ(publisher_->stats().read_failures["server_error"], 20u);
  EXPECT_EQ(Count(log_.str(), "failed (server_error)"), 1u);
  EXPECT_EQ(publisher_->StatusJson()["labels"], json()) << "the node was never read";
  publisher_->RunOnce();
  EXPECT_EQ(api_->patch_count(), 1u);
}

TEST_F(PublisherTest, AnApiThatDoesNotAnswerTimesOutAndIsRetried) {
  KubeAnnotationOptions o = Options();
  o.client.timeout = 300ms;
  Create(o);
  api_->HangNext();
  publisher_->RunOnce();
  api_->Release();
  EXPECT_EQ(publisher_->stats().read_failures["timeout"], 1u);
  EXPECT_NE(log_.str().find("failed (timeout)"), std::string::npos) << log_.str();
  clock_.Advance(1s);
  publisher_->RunOnce();
  EXPECT_EQ(api_->patch_count(), 1u);
}

TEST_F(PublisherTest, AServerTheCaDoesNotVouchForIsNeverSentTheToken) {
  KubeAnnotationOptions o = Options();
  o.client.ca_file = api_->wrong_ca_file();
  Create(o);
  publisher_->RunOnce();
  EXPECT_EQ(publisher_->stats().read_failures["tls"], 1u);
  EXPECT_TRUE(api_->requests().empty());
  EXPECT_NE(log_.str().find("failed (tls)"), std::string::npos) << log_.str();
}

TEST_F(PublisherTest, ARefusedConnectionIsCountedAndRetried) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  KubeAnnotationOptions o = Options();
  o.client.api_server = "https://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  Create(o);
  publisher_->RunOnce();
  clock_.Advance(1s);
  publisher_->RunOnce();
  EXPECT_EQ(publisher_->stats().read_failures["connection"], 2u);
  EXPECT_EQ(Count(log_.str(), "failed (connection)"), 1u) << log_.str();
  EXPECT_EQ(publisher_->StatusJson()["state"], "failing");
}

TEST_F(PublisherTest, ReadsTheNodeAgainEveryTenMinutesAndRestoresItsAnnotations) {
  Create();
  publisher_->RunOnce();
  ASSERT_EQ(publisher_->stats().node_reads, 1u);
  api_->SetAnnotations(json::object());  // someone removed them
  api_->SetLabels({{"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}});
  clock_.Advance(5min);
  publisher_->RunOnce();
  EXPECT_EQ(publisher_->stats().node_reads, 1u);
  EXPECT_EQ(api_->patch_count(), 1u);
  clock_.Advance(5min);
  publisher_->RunOnce();
  EXPECT_EQ(publisher_->stats().node_reads, 2u);
  EXPECT_EQ(api_->patch_count(), 2u);
  EXPECT_TRUE(api_->annotations().contains("flyt.dev/gpu-0"));
  EXPECT_EQ(publisher_->StatusJson()["labels"]["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-80GB");
}

TEST_F(PublisherTest, StopEndsARequestInFlightPromptly) {
  // On the real clock and its own thread: the first request (GET) hangs; Stop cancels it.
  auto p =
      KubeAnnotationPublisher::Create(Options(), [] { return std::vector<profile::GpuProfile>{}; });
  ASSERT_TRUE(p.ok());
  api_->HangNext();
  (*p)->Start();
  while (api_->requests().empty()) std::this_thread::sleep_for(5ms);
  (*p)->Stop();
  api_->Release();
  auto stats = (*p)->stats();
  EXPECT_TRUE(stats.read_failures.empty()) << "a cancelled request is not an API failure";
  EXPECT_EQ(log_.str().find("failed ("), std::string::npos) << log_.str();
}

TEST_F(PublisherTest, RunsOnItsOwnThread) {
  KubeAnnotationOptions o = Options();
  o.check_interval = 50ms;
  auto p = KubeAnnotationPublisher::Create(
      o, [] { return std::vector<profile::GpuProfile>{Gpu(3, profile::State::kIdle, 0, 0)}; });
  ASSERT_TRUE(p.ok());
  (*p)->Start();
  for (int i = 0; i < 1000 && api_->patch_count() == 0; ++i) std::this_thread::sleep_for(10ms);
  (*p)->Stop();
  EXPECT_EQ(api_->patch_count(), 1u);
  EXPECT_TRUE(api_->annotations().contains("flyt.dev/gpu-3"));
}

TEST(ResolveKubernetesTest, AutoOutsideAClusterIsQuietlyOff) {
  KubernetesConfig c;
  auto r = ResolveKubernetes(c, [](const std::string&) { return std::optional<std::string>(); });
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->options);
  EXPECT_FALSE(r->misconfigured);
  EXPECT_NE(r->off_reason.find("not in a Kubernetes cluster"), std::string::npos);
  c.mode = KubernetesMode::kOff;
  r = ResolveKubernetes(c, [](const std::string&) { return std::optional<std::string>("x"); });
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->options);
}

TEST(ResolveKubernetesTest, InAClusterTakesTheEnvironment) {
  TempDir dir;
  KubernetesConfig c;
  c.token_file = dir.path() + "/token";
  c.ca_file = dir.path() + "/ca.crt";
  WriteFile(c.token_file, "t");
  WriteFile(c.ca_file, "ca");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"},
                                            {"NODE_NAME", "gpu-node-1"}};
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  auto r = ResolveKubernetes(c, lookup);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->options);
  EXPECT_EQ(r->options->node_name, "gpu-node-1");
  EXPECT_EQ(r->options->client.api_server, "https://10.96.0.1:443");
  EXPECT_EQ(r->options->min_interval, 30s);
  env["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  r = ResolveKubernetes(c, lookup);
  ASSERT_TRUE(r.ok() && r->options);
  EXPECT_EQ(r->options->client.api_server, "https://[fd00::1]:443");
  // The config wins over the environment.
  c.node_name = "other-node";
  c.api_server = "https://api.example:6443";
  r = ResolveKubernetes(c, lookup);
  ASSERT_TRUE(r.ok() && r->options);
  EXPECT_EQ(r->options->node_name, "other-node");
  EXPECT_EQ(r->options->client.api_server, "https://api.example:6443");
  c = KubernetesConfig{};
  c.token_file = dir.path() + "/token";
  c.ca_file = dir.path() + "/ca.crt";
  // In a cluster without NODE_NAME: "auto" is off with a warning-worthy reason; true fails.
  env.erase("NODE_NAME");
  r = ResolveKubernetes(c, lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->options);
  EXPECT_TRUE(r->misconfigured);
  EXPECT_NE(r->off_reason.find("NODE_NAME"), std::string::npos);
  c.mode = KubernetesMode::kOn;
  r = ResolveKubernetes(c, lookup);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[kubernetes] enabled = true, but no node name"),
            std::string::npos)
      << r.status().message();
  env["NODE_NAME"] = "gpu-node-1";
  c.token_file = dir.path() + "/absent";
  r = ResolveKubernetes(c, lookup);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no readable service-account token"), std::string::npos);
  env.clear();
  r = ResolveKubernetes(c, lookup);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not in a Kubernetes cluster"), std::string::npos);
}

TEST(KubeStatusTest, DisabledStatusSaysWhy) {
  EXPECT_EQ(KubeAnnotationPublisher::DisabledStatusJson("[kubernetes] enabled = false"),
            json({{"enabled", false}, {"reason", "[kubernetes] enabled = false"}}));
}

}  // namespace
}  // namespace flyt::node
