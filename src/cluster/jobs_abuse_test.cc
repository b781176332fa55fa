// Issue 13, points 2, 8 and 10: requests that cost far more than they weigh, and answers that were
// lost. A task's shared parameters are stored once, not per experiment; a submission that would
// expand past [jobs] max_expanded_bytes is refused before anything is written; a submission that
// fails commits nothing; the jobs listing pages; node events are bounded in count, size and
// retention, and /events pages; an Idempotency-Key makes a retried allocation or submission
// answer what the first one got; and a store written before schema v3 still loads.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <set>

#include "cluster/cluster_testing.h"
#include "common/json.h"
#include "store/migrations.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::Heartbeat;
using test::Task;

class JobsAbuseTest : public test::ClusterFixture {
 protected:
  // A task of `values` experiments (a "seed" list) beside a shared parameter of `shared_bytes`.
  static json WideTask(size_t values, size_t shared_bytes) {
    json task = Task({1});
    json seeds = json::array();
    for (size_t i = 0; i < values; ++i) seeds.push_back(i);
    task["parameters"]["seed"] = seeds;
    task["parameters"]["blob"] = std::string(shared_bytes, 'x');
    return task;
  }
  // The bytes of the live rows of a table, and how many of them contain `needle`, read from the
  // store file itself (a second handle, as another process would).
  std::pair<size_t, size_t> RowBytes(store::Table table, const std::string& needle = "") {
    auto store = store::Store::Open(config_.store);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return {0, 0};
    auto rows = (*store)->List(table);
    EXPECT_TRUE(rows.ok());
    size_t bytes = 0, holding = 0;
    for (const store::Row& r : *rows) {
      if (r.deleted) continue;
      bytes += r.body.size();
      if (!needle.empty() && r.body.find(needle) != std::string::npos) ++holding;
    }
    return {bytes, holding};
  }
  size_t LiveRows(store::Table table) {
    auto store = store::Store::Open(config_.store);
    auto rows = (*store)->List(table);
    size_t n = 0;
    for (const store::Row& r : *rows) n += r.deleted ? 0 : 1;
    return n;
  }
};

TEST_F(JobsAbuseTest, ASharedParameterIsStoredOnceNotPerExperiment) {
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 8)).ok());
  const std::string blob(64 << 10, 'x');
  auto r = cluster_->Submit(alice_, WideTask(4096, blob.size()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)["jobs"].size(), 4096u);
  // The answer names the jobs and their own values; the shared ones once.
  const std::string answer = (*r).dump();
  EXPECT_LT(answer.size(), 2u << 20) << "the answer repeats the shared parameters";
  EXPECT_EQ((*r)["parameters"]["blob"].get<std::string>().size(), blob.size());
  EXPECT_FALSE((*r)["jobs"][7]["parameters"].contains("blob"));
  EXPECT_EQ((*r)["jobs"][7]["parameters"]["seed"], 7);

  // The store holds about one copy of the blob, not 4,096 (the old code: 8,192, 512 MiB).
  auto [job_bytes, jobs_with_blob] = RowBytes(store::Table::kJobs, blob);
  auto [task_bytes, tasks_with_blob] = RowBytes(store::Table::kTasks, blob);
  EXPECT_EQ(jobs_with_blob, 0u);
  EXPECT_EQ(tasks_with_blob, 1u);
  EXPECT_LT(job_bytes + task_bytes, blob.size() + 4096u * 4096u);

  // A job still shows its parameters in full, also after a restart.
  const std::string id = (*r)["jobs"][4095]["id"];
  Open();
  auto job = cluster_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["parameters"]["seed"], 4095);
  EXPECT_EQ((*job)["parameters"]["blob"], blob);
  EXPECT_EQ((*job)["parameters"]["max-model-len"], 8192);
  // A page of the listing does not repeat a large shared value either.
  auto page = cluster_->Jobs("", 1000);
  ASSERT_TRUE(page.ok());
  EXPECT_LT(page->dump().size(), 4u << 20);
  EXPECT_EQ((*page)["jobs"][0]["parameters_omitted"], true);
}

TEST_F(JobsAbuseTest, ASubmissionThatExpandsPastTheBoundIsRefusedBeforeAnythingIsWritten) {
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 8)).ok());
  // 16 values of 16 KiB × 256 seeds: a 256 KiB body that expands to 4,096 × 16 KiB = 64 MiB.
  json task = Task({1});
  json blobs = json::array(), seeds = json::array();
  for (int i = 0; i < 16; ++i) blobs.push_back(std::string(16 << 10, static_cast<char>('a' + i)));
  for (int i = 0; i < 256; ++i) seeds.push_back(i);
  task["parameters"]["blob"] = blobs;
  task["parameters"]["seed"] = seeds;
  const auto events_before = EventKinds().size();
  auto r = cluster_->Submit(alice_, task);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "payload_too_large") << r.status().ToString();
  EXPECT_NE(r.status().message().find("4096 experiment"), std::string::npos);
  EXPECT_NE(r.status().message().find("max_expanded_bytes"), std::string::npos);
  EXPECT_EQ(LiveRows(store::Table::kJobs), 0u);
  EXPECT_EQ(LiveRows(store::Table::kTasks), 0u);
  EXPECT_EQ(EventKinds().size(), events_before);
  EXPECT_EQ(Metric("flyt_cluster_submissions_too_large_total"), "1");
  // Under the bound it is taken.
  config_.max_expanded_bytes = 128 << 20;
  Open();
  EXPECT_TRUE(cluster_->Submit(alice_, task).ok());
}

TEST_F(JobsAbuseTest, ASubmissionThatFailsAtCommitLeavesNoJobInMemoryOrStore) {
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 8)).ok());
  mode_ = test::FlakyStore::Mode::kWritesFail;
  auto r = cluster_->Submit(alice_, WideTask(512, 100));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cluster_->Jobs("", 1000)->at("total"), 0);
  mode_ = test::FlakyStore::Mode::kOk;
  EXPECT_EQ(LiveRows(store::Table::kJobs), 0u);
  EXPECT_EQ(LiveRows(store::Table::kTasks), 0u);
  Open();
  EXPECT_EQ(cluster_->Jobs("", 1000)->at("total"), 0);
}

TEST_F(JobsAbuseTest, PagingWalksEveryJobExactlyOnceWhileJobsAreAdded) {
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 8)).ok());
  std::set<std::string> before;
  for (int round = 0; round < 3; ++round) {
    auto r = cluster_->Submit(alice_, WideTask(10, 10));
    ASSERT_TRUE(r.ok());
    for (const json& j : (*r)["jobs"]) before.insert(j["id"]);
    clock_.Advance(std::chrono::milliseconds(5));
  }
  std::map<std::string, int> seen;
  std::string cursor;
  int pages = 0;
  for (;;) {
    auto page = cluster_->Jobs("", 7, cursor);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    for (const json& j : (*page)["jobs"]) ++seen[j["id"].get<std::string>()];
    // Others submit while this client pages.
    clock_.Advance(std::chrono::milliseconds(5));
    ASSERT_TRUE(cluster_->Submit(bob_, WideTask(3, 10)).ok());
    if (!(*page)["more"].get<bool>()) {
      EXPECT_TRUE((*page)["continue"].is_null());
      break;
    }
    cursor = (*page)["continue"];
    ASSERT_LT(pages, 100);
  }
  for (const std::string& id : before) EXPECT_EQ(seen[id], 1) << id;
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
  EXPECT_FALSE(cluster_->Jobs("", 7, "not-a-cursor").ok());
  EXPECT_FALSE(cluster_->Jobs("", 7, "j1zz").ok());
}

TEST_F(JobsAbuseTest, NodeEventsAreBoundedInCountSizeAndRetention) {
  config_.event_max_bytes = 256 << 10;
  Open();
  json hb = Heartbeat("a", 2);
  hb["events"] = json::array();
  for (int i = 0; i < 100; ++i) {
    hb["events"].push_back({{"type", "xid"},
                            {"gpu", 0},
                            {"message", i % 2 ? std::string(100 << 10, 'm') : "small"}});
  }
  ASSERT_TRUE(cluster_->Heartbeat(node_, hb).ok());
  auto events = cluster_->Events(0, 1000);
  ASSERT_TRUE(events.ok());
  size_t node_events = 0, truncated = 0;
  for (const json& e : (*events)["events"]) {
    if (e["kind"] != "gpu.xid") continue;
    ++node_events;
    EXPECT_LE(e.dump().size(), config_.max_event_bytes + 200);
    if (e.value("truncated", false)) {
      ++truncated;
      EXPECT_EQ(e["original_bytes"].get<size_t>() > config_.max_event_bytes, true);
    }
  }
  EXPECT_EQ(node_events, config_.max_events_per_heartbeat);
  EXPECT_EQ(truncated, config_.max_events_per_heartbeat / 2);
  EXPECT_EQ(Metric("flyt_cluster_node_events_dropped_total"), "80");
  EXPECT_EQ(Metric("flyt_cluster_node_events_truncated_total"), "10");

  // Retention by bytes: 100 heartbeats of 20 events of ~3 KiB are ~6 MiB; 256 KiB stay.
  hb["events"] = json::array();
  for (int i = 0; i < 20; ++i) {
    hb["events"].push_back({{"type", "xid"}, {"message", std::string(3000, 'b')}});
  }
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(cluster_->Heartbeat(node_, hb).ok());
  clock_.Advance(std::chrono::minutes(2));
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  size_t bytes = 0, count = 0;
  int64_t after = 0;
  // /events pages: 50 at a time, each event once, in order.
  for (int pages = 0;; ++pages) {
    ASSERT_LT(pages, 1000);
    auto page = cluster_->Events(after, 50);
    ASSERT_TRUE(page.ok());
    ASSERT_LE((*page)["events"].size(), 50u);
    for (const json& e : (*page)["events"]) {
      EXPECT_GT(e["id"].get<int64_t>(), after);
      after = e["id"];
      bytes += e.dump().size();
      ++count;
    }
    EXPECT_EQ((*page)["next_after"], after);
    if (!(*page)["more"].get<bool>()) break;
  }
  EXPECT_GT(count, 20u);
  EXPECT_LE(bytes, config_.event_max_bytes + (64u << 10));
  auto latest = cluster_->Events(0, 10, /*latest=*/true);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ((*latest)["events"].size(), 10u);
  EXPECT_EQ((*latest)["more"], true);
}

TEST_F(JobsAbuseTest, AnIdempotencyKeyReturnsTheSameLeaseAndRefusesAnotherBody) {
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 4)).ok());
  const json body = {{"gpus", 2}};
  auto first = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string id = (*first)["id"];
  auto again = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)["id"], id);
  EXPECT_EQ((*again)["replayed"], true);
  EXPECT_EQ(LeaseIds().size(), 1u) << "a retry granted a second lease";
  // Another caller's same key is another key.
  auto bobs = cluster_->Allocate(bob_, body, "key-1");
  ASSERT_TRUE(bobs.ok());
  EXPECT_NE((*bobs)["id"], id);
  // The same key with another body: 409.
  auto other = cluster_->Allocate(alice_, {{"gpus", 1}}, "key-1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().reason(), "idempotency_key_reused");
  // Malformed keys.
  EXPECT_EQ(cluster_->Allocate(alice_, body, std::string(256, 'k')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->Allocate(alice_, body, "a\nb").status().code(),
            StatusCode::kInvalidArgument);
  // After a restart, and after the lease was released: the first answer, marked so.
  Open();
  auto restarted = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ((*restarted)["id"], id);
  ASSERT_TRUE(cluster_->Release(alice_, id).ok());
  auto released = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(released.ok());
  EXPECT_EQ((*released)["id"], id);
  EXPECT_EQ((*released)["lease_ended"], true);
  EXPECT_EQ(LeaseIds().size(), 1u);  // bob's
  // Keys expire after [manager] idempotency_keep_for: then the key is new again.
  clock_.Advance(config_.idempotency_keep_for + std::chrono::minutes(1));
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 4)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  auto fresh = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_NE((*fresh)["id"], id);
}

TEST_F(JobsAbuseTest, AnIdempotencyKeyReturnsTheSameJobs) {
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 8)).ok());
  const json task = WideTask(5, 10);
  auto first = cluster_->Submit(alice_, task, "submit-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Open();
  auto again = cluster_->Submit(alice_, task, "submit-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)["replayed"], true);
  ASSERT_EQ((*again)["jobs"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ((*again)["jobs"][i]["id"], (*first)["jobs"][i]["id"]);
  EXPECT_EQ(cluster_->Jobs("", 100)->at("total"), 5);
  auto other = cluster_->Submit(alice_, WideTask(6, 10), "submit-1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().reason(), "idempotency_key_reused");
  EXPECT_EQ(Metric("flyt_cluster_idempotent_replays_total"), "1");
}

// A store written before schema v3 (parameters inline in each job row, no tasks table) opens,
// migrates and serves its jobs as before.
TEST_F(JobsAbuseTest, JobsOfASchemaV2StoreStillLoad) {
  const std::string path = (dir_ / "flyt.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << (error ? error : "") << "\n" << sql;
    sqlite3_free(error);
  };
  exec(store::internal::kSqliteBootstrapSql);
  for (const store::internal::Migration& m : store::internal::Migrations()) {
    if (m.version > 2) break;
    exec(m.sqlite_sql);
    exec("INSERT INTO schema_migrations (version) VALUES (" + std::to_string(m.version) + ")");
  }
  // The body the old code wrote: full parameters, and a copy inside the estimate.
  const json old_job = {
      {"id", "job-old"},
      {"submission", "sub-old"},
      {"task_name", "t"},
      {"model", "meta-llama/Llama-3.1-8B-Instruct"},
      {"runtime", "vllm"},
      {"experiment", 0},
      {"experiments", 1},
      {"parameters", {{"max-model-len", 8192}, {"tp", 1}, {"note", "kept"}}},
      {"estimate", {{"gpus", 1}, {"parameters", {{"max-model-len", 8192}, {"tp", 1}}}}},
      {"owner", "alice"},
      {"priority", 0},
      {"order", 1 << 20},
      {"requirement", {{"gpus", 1}}},
      {"lease_id_planned", "lease-old"},
      {"timeout_seconds", 300},
      {"status", "queued"},
      {"message", "waiting"},
      {"submitted_at_ms", 1700000000000},
  };
  std::string body = DumpJson(old_job);
  std::string quoted;
  for (char c : body) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  exec("INSERT INTO jobs (id, seq, deleted, body) VALUES ('job-old', 1, FALSE, '" + quoted +
       "')");
  exec("UPDATE meta SET value = 1 WHERE key = 'revision'");
  exec("INSERT INTO events (at_ms, kind, body) VALUES (1, 'job.submitted', '{\"message\":\"m\"}')");
  sqlite3_close(db);

  Open();
  auto job = cluster_->GetJob("job-old");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["parameters"]["note"], "kept");
  EXPECT_EQ((*job)["parameters"]["max-model-len"], 8192);
  auto list = cluster_->Jobs("", 10);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["jobs"].size(), 1u);
  EXPECT_EQ((*list)["jobs"][0]["parameters"]["note"], "kept");
  auto events = cluster_->Events(0, 10);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ((*events)["events"].size(), 1u);
}

}  // namespace
}  // namespace flyt::cluster
