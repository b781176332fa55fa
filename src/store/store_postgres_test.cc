// The Store on PostgreSQL: the shared behaviour tests (store_test_suite.h) against a throw-away
// server started by tests/support/postgres.sh for this test process, each test in a schema of its
// own, and what only a server-backed store shows (passwords kept out of messages, reconnecting).
//
// Without the PostgreSQL server programs these tests fail, unless FLYT_SKIP_POSTGRES=1 says that
// this machine is not expected to have them (then they are skipped).
#include <libpq-fe.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/strings.h"
#include "common/subprocess.h"
#include "store/store.h"
#include "store/store_test_suite.h"

namespace flyt::store::test {
namespace {

namespace fs = std::filesystem;

constexpr int kNotInstalled = 3;  // postgres.sh's exit status when PostgreSQL is missing

// "" or the error.
std::string PgExec(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* result = PQexec(conn, sql.c_str());
    if (PQresultStatus(result) != PGRES_COMMAND_OK && PQresultStatus(result) != PGRES_TUPLES_OK) {
      error = PQresultErrorMessage(result);
    }
    PQclear(result);
  }
  PQfinish(conn);
  return error;
}

// One server per test process; every NewUrl() is a fresh schema in its database `flyt`. A server
// that cannot be started fails (or skips) each test rather than the global set-up, which GoogleTest
// would report as skipped tests.
class PostgresServer final : public ::testing::Environment, public TestDatabase {
 public:
  void SetUp() override {
    std::string pattern = "/tmp/flyt-pg-XXXXXX";  // short: the unix socket lives inside
    if (mkdtemp(pattern.data()) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = pattern;
    CommandOptions options;
    options.timeout = std::chrono::seconds(120);
    auto run = RunCommand({"bash", Script(), "start", dir_, std::to_string(getpid())}, options);
    if (!run.ok()) {
      error_ = "postgres.sh start: " + run.status().ToString();
    } else if (run->exit_code == kNotInstalled) {
      const char* skip = std::getenv("FLYT_SKIP_POSTGRES");
      if (skip != nullptr && std::string_view(skip) == "1") {
        skip_ = "PostgreSQL is not installed (FLYT_SKIP_POSTGRES=1): " + run->stderr_text;
      } else {
        error_ = "PostgreSQL is not installed, so the PostgreSQL store cannot be tested: " +
                 run->stderr_text +
                 "Install it (scripts/install-deps.sh), or set FLYT_SKIP_POSTGRES=1 to skip.";
      }
    } else if (run->exit_code != 0) {
      error_ = "postgres.sh start failed:\n" + run->stderr_text;
    } else {
      url_ = std::string(Trim(run->stdout_text));
      if (!StartsWith(url_, "postgresql://")) error_ = "postgres.sh printed no URL: " + url_;
    }
  }

  void CheckUsable() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    if (!error_.empty()) FAIL() << error_;
  }

  void TearDown() override {
    if (!dir_.empty()) {
      auto run = RunCommand({"bash", Script(), "stop", dir_});
      EXPECT_TRUE(run.ok() && run->exit_code == 0)
          << (run.ok() ? run->stderr_text : run.status().ToString());
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  std::string NewUrl() override {
    const std::string schema = "test_" + std::to_string(++count_);
    std::string error = PgExec(url_, "CREATE SCHEMA " + schema);
    EXPECT_EQ(error, "");
    if (!error.empty()) return "";
    return url_ + "?options=-csearch_path%3D" + schema;
  }

  std::string ExecRaw(const std::string& url, const std::string& sql) override {
    return PgExec(url, sql);
  }

  // postgresql://postgres@127.0.0.1:PORT/flyt
  const std::string& url() const { return url_; }
  std::string port() const {
    const size_t colon = url_.rfind(':');
    return url_.substr(colon + 1, url_.rfind('/') - colon - 1);
  }

 private:
  static std::string Script() {
    return std::string(FLYT_SOURCE_DIR) + "/tests/support/postgres.sh";
  }

  std::string dir_;
  std::string url_;
  std::string error_;  // why the server is not there
  std::string skip_;   // why that is fine
  int count_ = 0;
};

PostgresServer* const kServer =
    static_cast<PostgresServer*>(::testing::AddGlobalTestEnvironment(new PostgresServer));

TestDatabase* Server() { return kServer; }

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest,
                         ::testing::Values(Backend{"postgres", Server}), BackendName);

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { kServer->CheckUsable(); }
};

TEST_F(PostgresStoreTest, DescribeAndErrorsNeverShowThePassword) {
  const std::string with_password =
      "postgresql://postgres:s3cret@127.0.0.1:" + kServer->port() + "/flyt";
  auto store = Store::Open(with_password);  // the test server trusts any password
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Describe(), "postgresql://127.0.0.1:" + kServer->port() + "/flyt");
  EXPECT_EQ((*store)->SchemaVersion(), LatestSchemaVersion());

  auto missing_db =
      Store::Open("postgres://postgres:s3cret@127.0.0.1:" + kServer->port() + "/no_such_db");
  ASSERT_FALSE(missing_db.ok());
  EXPECT_EQ(missing_db.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing_db.status().message().find("no_such_db"), std::string::npos)
      << missing_db.status().message();
  EXPECT_EQ(missing_db.status().message().find("s3cret"), std::string::npos)
      << missing_db.status().message();
}

TEST_F(PostgresStoreTest, AServerThatIsNotThereIsUnavailable) {
  // Port 1 is privileged and never a PostgreSQL server.
  auto store = Store::Open("postgresql://postgres:s3cret@127.0.0.1:1/flyt?connect_timeout=5");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("postgresql://127.0.0.1:1/flyt"), std::string::npos)
      << store.status().message();
  EXPECT_EQ(store.status().message().find("s3cret"), std::string::npos);
}

TEST_F(PostgresStoreTest, AMalformedUrlIsInvalidArgument) {
  auto store = Store::Open("postgresql://127.0.0.1/flyt?no_such_setting=1");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << store.status().ToString();
  EXPECT_NE(store.status().message().find("no_such_setting"), std::string::npos)
      << store.status().message();
}

// pg_terminate_backend only signals the session: wait until it is gone.
void WaitForNoSessions() {
  for (int i = 0; i < 500; ++i) {
    PGconn* conn = PQconnectdb(kServer->url().c_str());
    PGresult* result =
        PQexec(conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'flyt'");
    const bool gone = PQresultStatus(result) == PGRES_TUPLES_OK &&
                      std::string_view(PQgetvalue(result, 0, 0)) == "0";
    PQclear(result);
    PQfinish(conn);
    if (gone) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "the flyt session did not end";
}

TEST_F(PostgresStoreTest, ALostConnectionIsUnavailableAndTheNextCallReconnects) {
  const std::string url = kServer->NewUrl();
  auto opened = Store::Open(url);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  FLYT_ASSERT_OK(store.Update(Durability::kDurable,
                              [](Txn& txn) { return txn.Put(Table::kNodes, "n1", "{}"); }));

  // The server ends every flyt session (as on a failover or an administrator's kill).
  const std::string kill_sessions =
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'flyt'";
  ASSERT_EQ(PgExec(kServer->url(), kill_sessions), "");
  WaitForNoSessions();
  Status lost = store.Update(Durability::kDurable,
                             [](Txn& txn) { return txn.Put(Table::kNodes, "n2", "{}"); });
  EXPECT_EQ(lost.code(), StatusCode::kUnavailable) << lost.ToString();
  FLYT_ASSERT_OK(store.Update(Durability::kDurable,
                              [](Txn& txn) { return txn.Put(Table::kNodes, "n3", "{}"); }));

  // The same on the read path.
  ASSERT_EQ(PgExec(kServer->url(), kill_sessions), "");
  WaitForNoSessions();
  EXPECT_EQ(store.List(Table::kNodes).status().code(), StatusCode::kUnavailable);
  auto nodes = store.List(Table::kNodes);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].id, "n1");
  EXPECT_EQ((*nodes)[1].id, "n3");
  EXPECT_EQ(store.Revision().value(), 2);
}

TEST_F(PostgresStoreTest, TheDatabaseItselfRefusesASecondExclusiveClaim) {
  const std::string url = kServer->NewUrl();
  auto store = Store::Open(url);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(PgExec(url, "INSERT INTO gpu_claims VALUES ('n1/GPU-0', 'l1', TRUE)"), "");
  EXPECT_EQ(PgExec(url, "INSERT INTO gpu_claims VALUES ('n1/GPU-0', 'l2', FALSE)"), "");
  EXPECT_NE(PgExec(url, "INSERT INTO gpu_claims VALUES ('n1/GPU-0', 'l3', TRUE)"), "");
}

}  // namespace
}  // namespace flyt::store::test
