// Test helpers shared by the Cluster's unit tests: node heartbeats and tasks as the API receives
// them, a Cluster on a private SQLite file driven by a FakeClock, and FlakyStore — a Store that
// can be made to fail the way a real one does in an outage. Test-only; not thread-safe apart
// from FlakyStore's mode, which any thread may change.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "cluster/cluster.h"
#include "cluster/config.h"
#include "gpu/json.h"
#include "store/store.h"

namespace flyt::cluster::test {

inline constexpr uint64_t kGiB = 1ULL << 30;

// A node manager's snapshot of `gpus` H100s with `free_gib` free and `util` % busy; the first
// one lost when `lost_first`. UUIDs are "GPU-<index>": give them a node's own with OwnUuids.
inline nlohmann::json Snapshot(int gpus, uint64_t free_gib = 80, uint32_t util = 0,
                               bool lost_first = false) {
  gpu::GpuSnapshot s;
  s.source = gpu::Source::kNvml;
  s.taken_at = std::chrono::system_clock::now();
  for (int i = 0; i < gpus; ++i) {
    gpu::GpuInfo g;
    g.index = static_cast<uint32_t>(i);
    g.uuid = "GPU-" + std::to_string(i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.pci_bus_id = "00000000:0" + std::to_string(i) + ":00.0";
    g.memory_total_bytes = 80 * kGiB;
    g.memory_free_bytes = free_gib * kGiB;
    g.memory_used_bytes = (80 - free_gib) * kGiB;
    g.gpu_util_percent = util;
    g.lost = lost_first && i == 0;
    s.gpus.push_back(g);
  }
  return gpu::ToJson(s);
}

// The node's own GPUs: "GPU-<node>-<index>", so no two nodes report one UUID (the manager refuses
// that), as with real GPUs.
inline nlohmann::json OwnUuids(nlohmann::json snapshot, const std::string& node) {
  for (nlohmann::json& g : snapshot["gpus"]) {
    g["uuid"] = "GPU-" + node + "-" + std::to_string(g["index"].get<int>());
  }
  return snapshot;
}

inline nlohmann::json Heartbeat(const std::string& name, int gpus,
                                const std::string& api_url = "") {
  nlohmann::json j = {{"name", name}, {"snapshot", OwnUuids(Snapshot(gpus), name)}};
  if (!api_url.empty()) j["api_url"] = api_url;
  return j;
}

// A task of one experiment per entry of `tp` (each needs that many GPUs on one node).
inline nlohmann::json Task(std::vector<int> tp, nlohmann::json scheduling = nlohmann::json::object()) {
  nlohmann::json j = {{"task_name", "t"},
                      {"model", {{"id_or_path", "meta-llama/Llama-3.1-8B-Instruct"}}},
                      {"base_runtime", "vllm"},
                      {"parameters", {{"max-model-len", nlohmann::json::array({8192})}}},
                      {"parallel_config", {{"tp", tp}}}};
  if (!scheduling.empty()) j["scheduling"] = scheduling;
  return j;
}

// A Store in front of a real one that fails like a store in an outage:
//   kWritesFail  SQLite on a read-only or full disk: reads work; a transaction that wrote
//                anything fails when it commits (after the caller changed its memory).
//   kDown        PostgreSQL gone: every call fails at once.
//   kDamaged     a damaged SQLite file: a transaction that wrote fails as SQLite's "malformed"
//                does (kInternal), and the consistency check finds the damage.
// The first two fail kUnavailable with reason store_unavailable, as the real backends say it.
class FlakyStore final : public store::Store {
 public:
  enum class Mode { kOk, kWritesFail, kDown, kDamaged };

  explicit FlakyStore(std::unique_ptr<store::Store> inner, std::atomic<Mode>& mode)
      : inner_(std::move(inner)), mode_(mode) {}

  Status Update(store::Durability durability,
                const std::function<Status(store::Txn&)>& fn) override {
    if (mode_ == Mode::kDown) return Down();
    return inner_->Update(durability, [&](store::Txn& inner) -> Status {
      Recording txn(inner);
      FLYT_RETURN_IF_ERROR(fn(txn));
      if (txn.wrote && mode_ == Mode::kWritesFail) {
        return Status(StatusCode::kUnavailable, "sqlite:/flaky.db: disk I/O error (commit)")
            .WithReason(store::kStoreUnavailableReason);
      }
      if (txn.wrote && mode_ == Mode::kDamaged) {
        return Internal(inner_->Describe() +
                        ": database disk image is malformed (the file is damaged or is not an "
                        "SQLite database)");
      }
      return Status::Ok();
    });
  }
  Result<std::vector<store::Row>> List(store::Table table, int64_t after_seq) override {
    if (mode_ == Mode::kDown) return Down();
    return inner_->List(table, after_seq);
  }
  Result<int64_t> Revision() override {
    if (mode_ == Mode::kDown) return Down();
    return inner_->Revision();
  }
  Result<std::vector<store::EventRow>> Events(int64_t after_id, size_t limit) override {
    if (mode_ == Mode::kDown) return Down();
    return inner_->Events(after_id, limit);
  }
  Result<std::vector<store::EventRow>> LatestEvents(size_t limit) override {
    if (mode_ == Mode::kDown) return Down();
    return inner_->LatestEvents(limit);
  }
  Status PruneEvents(int64_t before_ms, size_t keep) override {
    if (mode_ == Mode::kWritesFail || mode_ == Mode::kDown) return Down();
    return inner_->PruneEvents(before_ms, keep);
  }
  Status PruneEventBytes(uint64_t max_bytes) override {
    if (mode_ == Mode::kWritesFail || mode_ == Mode::kDown) return Down();
    return inner_->PruneEventBytes(max_bytes);
  }
  Status Probe() override {
    if (mode_ == Mode::kWritesFail || mode_ == Mode::kDown) return Down();
    return inner_->Probe();
  }
  int64_t CreatedMs() const override { return inner_->CreatedMs(); }
  Status Check() override {
    if (mode_ == Mode::kDamaged) {
      return Internal(inner_->Describe() + " is damaged (quick_check: Tree 7 page 7: btreeInitPage"
                                           "() returns error code 11)")
          .WithReason(store::kStoreDamagedReason);
    }
    return inner_->Check();
  }
  int SchemaVersion() const override { return inner_->SchemaVersion(); }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  static Status Down() {
    return Status(StatusCode::kUnavailable, "postgresql://db/flyt: connection lost: server closed")
        .WithReason(store::kStoreUnavailableReason);
  }

  // Forwards everything, noting whether the transaction wrote.
  class Recording final : public store::Txn {
   public:
    explicit Recording(store::Txn& inner) : inner_(inner) {}
    int64_t Revision() const override { return inner_.Revision(); }
    Status Put(store::Table t, const std::string& id, const std::string& body) override {
      wrote = true;
      return inner_.Put(t, id, body);
    }
    Status Delete(store::Table t, const std::string& id) override {
      wrote = true;
      return inner_.Delete(t, id);
    }
    Result<std::optional<std::string>> Get(store::Table t, const std::string& id) override {
      return inner_.Get(t, id);
    }
    Result<std::vector<store::Row>> ListSince(store::Table t, int64_t after) override {
      return inner_.ListSince(t, after);
    }
    Status ClaimGpus(const std::string& lease, const std::vector<std::string>& keys,
                     bool exclusive) override {
      wrote = true;
      return inner_.ClaimGpus(lease, keys, exclusive);
    }
    Status ReleaseGpus(const std::string& lease) override {
      wrote = true;
      return inner_.ReleaseGpus(lease);
    }
    Status AppendEvent(int64_t at_ms, const std::string& kind, const std::string& body) override {
      wrote = true;
      return inner_.AppendEvent(at_ms, kind, body);
    }
    Status PutJob(const std::string& id, const std::string& body,
                  std::optional<int64_t> finished_at_ms) override {
      wrote = true;
      return inner_.PutJob(id, body, finished_at_ms);
    }
    Result<std::vector<std::string>> PruneFinishedJobs(
        const store::JobRetention& retention) override {
      wrote = true;
      return inner_.PruneFinishedJobs(retention);
    }
    Result<std::optional<store::IdempotencyRecord>> GetIdempotency(
        const std::string& scope, const std::string& key) override {
      return inner_.GetIdempotency(scope, key);
    }
    Status PutIdempotency(const std::string& scope, const std::string& key,
                          const store::IdempotencyRecord& record) override {
      wrote = true;
      return inner_.PutIdempotency(scope, key, record);
    }
    Status PruneIdempotencyKeys(int64_t now_ms) override {
      return inner_.PruneIdempotencyKeys(now_ms);
    }
    bool wrote = false;

   private:
    store::Txn& inner_;
  };

  std::unique_ptr<store::Store> inner_;
  std::atomic<Mode>& mode_;
};

// A Cluster on a private SQLite file behind a FlakyStore, with a FakeClock.
class ClusterFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-cluster-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_.var_dir = dir_.string();
    config_.store = "sqlite:" + (dir_ / "flyt.db").string();
  }
  void TearDown() override {
    cluster_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)opens the cluster on the same file, as a restarted manager would.
  void Open() {
    cluster_.reset();
    mode_ = FlakyStore::Mode::kOk;
    auto store = store::Store::Open(config_.store);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    cluster_ = std::make_unique<Cluster>(
        std::make_unique<FlakyStore>(std::move(store).value(), mode_), config_, clock_);
    Status s = cluster_->Load();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<std::string> EventKinds() {
    std::vector<std::string> kinds;
    auto events = cluster_->Events(0, 100000);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    if (events.ok()) {
      for (const nlohmann::json& e : (*events)["events"]) kinds.push_back(e["kind"]);
    }
    return kinds;
  }
  std::set<std::string> LeaseIds() {
    std::set<std::string> ids;
    const nlohmann::json all = cluster_->Allocations();
    for (const nlohmann::json& l : all["allocations"]) ids.insert(l["id"].get<std::string>());
    return ids;
  }
  // The value of one series of /metrics ("" when absent).
  std::string Metric(const std::string& series) {
    const std::string text = cluster_->Metrics();
    const std::string prefix = series + " ";
    size_t at = text.find("\n" + prefix);
    if (at == std::string::npos) return "";
    at += 1 + prefix.size();
    return text.substr(at, text.find('\n', at) - at);
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  ClusterConfig config_;
  std::atomic<FlakyStore::Mode> mode_{FlakyStore::Mode::kOk};
  std::unique_ptr<Cluster> cluster_;
  const Caller admin_{"admin", Role::kAdmin};
  // A node on this machine: its heartbeats come from 127.0.0.1, where its API is called.
  const Caller node_{"node", Role::kNode, "127.0.0.1"};
  const Caller alice_{"alice", Role::kClient};
  const Caller bob_{"bob", Role::kClient};
};

}  // namespace flyt::cluster::test
