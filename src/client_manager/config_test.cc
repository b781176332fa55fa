// The client manager's config: defaults, every key read, and errors that name the file, line and
// key. Also the shipped configs/client-manager.toml parses as it is.
#include "client_manager/config.h"

#include <gtest/gtest.h>

#include "common/strings.h"

namespace flyt::client_manager {
namespace {

using std::chrono::milliseconds;

TEST(ClientManagerConfigTest, Defaults) {
  auto c = ParseClientManagerConfig("", "(defaults)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->socket_path, "/run/flyt/client-manager.sock");
  EXPECT_EQ(c->socket_mode, 0666u);
  EXPECT_EQ(c->release_after, milliseconds(30000));
  EXPECT_EQ(c->ttl_seconds, 60);
  EXPECT_EQ(c->RenewInterval(), milliseconds(20000));
  EXPECT_EQ(c->acquire_timeout, milliseconds(30000));
  EXPECT_FALSE(c->name.empty());
  EXPECT_EQ(c->log_level, "info");
  EXPECT_FALSE(ValidateClientManagerConfig(*c).ok());  // no cluster manager yet
}

TEST(ClientManagerConfigTest, EveryKey) {
  auto c = ParseClientManagerConfig(R"(
[client]
name = "laptop-7"
socket = "/tmp/x/cm.sock"
socket_mode = "0660"
release_after = "2m"
renew_interval = "10s"
ttl_seconds = 120
acquire_timeout = "1500ms"
max_connections = 10
max_profiles = 3
[cluster-manager]
address = "http://10.0.0.1:12400"
token = "tok"
[lease]
sm_count = 33
memory_mb = 8192
gpu_model = "H100"
node = "gpu-3"
[log]
level = "debug"
)",
                                    "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "laptop-7");
  EXPECT_EQ(c->socket_path, "/tmp/x/cm.sock");
  EXPECT_EQ(c->socket_mode, 0660u);
  EXPECT_EQ(c->release_after, milliseconds(120000));
  EXPECT_EQ(c->RenewInterval(), milliseconds(10000));
  EXPECT_EQ(c->ttl_seconds, 120);
  EXPECT_EQ(c->acquire_timeout, milliseconds(1500));
  EXPECT_EQ(c->max_connections, 10);
  EXPECT_EQ(c->max_profiles, 3);
  EXPECT_EQ(c->cluster_manager, "http://10.0.0.1:12400");
  EXPECT_EQ(c->token, "tok");
  EXPECT_EQ(c->lease.sm_count, 33u);
  EXPECT_FALSE(c->lease.sm_percent.has_value());
  EXPECT_EQ(c->lease.memory_mb, 8192u);
  EXPECT_EQ(c->lease.gpu_model, "H100");
  EXPECT_EQ(c->node, "gpu-3");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_TRUE(ValidateClientManagerConfig(*c).ok());
  // A TOML octal works too.
  auto o = ParseClientManagerConfig("[client]\nsocket_mode = 0o600\n", "t.toml");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->socket_mode, 0600u);
}

TEST(ClientManagerConfigTest, ErrorsNameFileLineAndKey) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"[client]\nrelease_after = \"30 parsecs\"\n", "t.toml:2: client.release_after: "},
      {"[client]\nttl_seconds = 5\n", "t.toml:2: client.ttl_seconds"},
      {"[client]\nsocket_mode = \"0999\"\n", "t.toml:2: client.socket_mode"},
      {"[client]\nsocket = \"relative.sock\"\n", "t.toml:2: client.socket"},
      {"[client]\nttl_seconds = 30\nrenew_interval = \"30s\"\n",
       "t.toml:3: client.renew_interval: must be shorter than client.ttl_seconds"},
      {"[client]\nacquire_timeout = \"1ms\"\n", "t.toml:2: client.acquire_timeout"},
      {"\n[lease]\nsm_count = 8\nsm_percent = 10\n", "t.toml:4: lease.sm_percent"},
      {"[lease]\nsm_percent = 101\n", "t.toml:2: lease.sm_percent"},
      {"[lease]\nmemory_mb = 0\n", "t.toml:2: lease.memory_mb"},
      {"[lease]\nmemroy_mb = 10\n", "lease.memroy_mb"},
      {"[cluster-manager]\naddress = 5\n", "t.toml:2: cluster-manager.address"},
      {"[log]\nlevel = \"loud\"\n", "t.toml:2: log.level"},
      {"[nope]\n", "nope"},
  };
  for (const Case& c : cases) {
    auto r = ParseClientManagerConfig(c.text, "t.toml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << "got: " << r.status().message() << "\nwanted: " << c.expected;
  }
}

TEST(ClientManagerConfigTest, Durations) {
  EXPECT_EQ(*ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(*ParseDuration("30s"), milliseconds(30000));
  EXPECT_EQ(*ParseDuration("30"), milliseconds(30000));
  EXPECT_EQ(*ParseDuration("5m"), milliseconds(300000));
  EXPECT_EQ(*ParseDuration("1h"), milliseconds(3600000));
  for (const char* bad : {"", "s", "-1s", "1d", "1.5s", "99999999999999999999s", "10 s"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(ClientManagerConfigTest, ProfilesOverlayAndCompare) {
  LeaseProfile base;
  base.sm_percent = 25;
  base.memory_mb = 100;
  LeaseProfile over;
  over.sm_count = 16;
  LeaseProfile p = base.Overlaid(over);
  EXPECT_EQ(p.sm_count, 16u);
  EXPECT_FALSE(p.sm_percent.has_value());
  EXPECT_EQ(p.memory_mb, 100u);
  EXPECT_EQ(base.Overlaid(LeaseProfile{}).Key(), base.Key());
  EXPECT_NE(p.Key(), base.Key());
}

TEST(ClientManagerConfigTest, TheShippedConfigParses) {
  auto text = ReadFile(std::string(FLYT_SOURCE_DIR) + "/configs/client-manager.toml");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto c = ParseClientManagerConfig(*text, "configs/client-manager.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->socket_path, "/run/flyt/client-manager.sock");
  EXPECT_EQ(c->release_after, milliseconds(30000));
}

}  // namespace
}  // namespace flyt::client_manager
