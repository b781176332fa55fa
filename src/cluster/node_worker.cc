#include "cluster/node_worker.h"

#include <spdlog/spdlog.h>

#include "common/http.h"

namespace flyt::cluster {

using nlohmann::json;

NodeWorker::NodeWorker(NodeWorkerHost& host, std::string node_api_token)
    : host_(host), node_api_token_(std::move(node_api_token)) {}

NodeWorker::~NodeWorker() { Stop(); }

void NodeWorker::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void NodeWorker::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    work_.clear();  // node calls not yet made are dropped; a restart re-derives nothing from them
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void NodeWorker::OpenSession(const std::string& job_id) {
  Post([this, job_id] { DoOpen(job_id); });
}

void NodeWorker::CloseSession(const std::string& job_id) {
  Post([this, job_id] { DoClose(job_id); });
}

void NodeWorker::Post(std::function<void()> task) {
  MutexLock lock(mu_);
  if (stopping_) return;
  work_.push_back(std::move(task));
  cv_.NotifyOne();
}

void NodeWorker::Loop() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      while (!stopping_ && work_.empty()) cv_.Wait(mu_);
      if (work_.empty()) return;  // stopping, and nothing left
      task = std::move(work_.front());
      work_.pop_front();
    }
    // A task talks to a node manager; nothing it meets may take the manager down.
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("node call failed: {}", e.what());
    } catch (...) {
      spdlog::error("node call failed");
    }
  }
}

namespace {
// What a node's monitoring answers may weigh (a session's stats are a few KiB).
constexpr size_t kMaxNodeAnswerBytes = 1 << 20;

Result<std::unique_ptr<http::JsonClient>> NodeClient(const std::string& url,
                                                     const std::string& token) {
  auto client = http::JsonClient::Connect(url, token, "the node manager");
  if (client.ok()) (*client)->SetMaxResponseBytes(kMaxNodeAnswerBytes);
  return client;
}

// A session id goes into a URL path: only a plain one is taken from a node.
bool PlainSessionId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}
}  // namespace

Result<json> NodeWorker::DeleteSession(const std::string& url, const std::string& session) const {
  auto client = NodeClient(url, node_api_token_);
  if (!client.ok()) return client.status();
  return (*client)->Delete("/api/v1/monitoring/sessions/" + session);
}

Result<json> NodeWorker::StartGpuServer(const std::string& url, const std::string& lease_id,
                                        const json& body, std::chrono::seconds timeout) const {
  auto client = NodeClient(url, node_api_token_);
  if (!client.ok()) return client.status();
  (*client)->SetTimeouts(std::chrono::seconds(5), timeout);
  return (*client)->Put("/api/v1/gpu-servers/" + lease_id, body);
}

Result<json> NodeWorker::GpuServerAction(const std::string& url, const std::string& key,
                                         const std::string& action, const json& body,
                                         std::chrono::seconds timeout) const {
  auto client = NodeClient(url, node_api_token_);
  if (!client.ok()) return client.status();
  (*client)->SetTimeouts(std::chrono::seconds(5), timeout);
  return (*client)->Post("/api/v1/gpu-servers/" + key + "/" + action, body);
}

Result<json> NodeWorker::GetGpuServer(const std::string& url, const std::string& key,
                                      std::chrono::seconds timeout) const {
  auto client = NodeClient(url, node_api_token_);
  if (!client.ok()) return client.status();
  (*client)->SetTimeouts(std::chrono::seconds(5), timeout);
  return (*client)->Get("/api/v1/gpu-servers/" + key);
}

void NodeWorker::DrainGpuServer(const std::string& url, const std::string& lease_id) {
  Post([this, url, lease_id] {
    auto client = NodeClient(url, node_api_token_);
    if (!client.ok()) return;
    (*client)->SetTimeouts(std::chrono::seconds(5), std::chrono::seconds(10));
    Result<json> answer = (*client)->Delete("/api/v1/gpu-servers/" + lease_id);
    if (!answer.ok() && answer.status().code() != StatusCode::kNotFound) {
      spdlog::warn("draining the GPU server of {} at {}: {} (the node's next heartbeat drains it)",
                   lease_id, url, answer.status().message());
    }
  });
}

void NodeWorker::DoOpen(const std::string& job_id) {
  std::optional<SessionTarget> target = host_.SessionToOpen(job_id);
  if (!target) return;
  auto client = NodeClient(target->url, node_api_token_);
  Result<json> answer =
      client.ok() ? (*client)->Post("/api/v1/monitoring/sessions", {{"gpus", target->gpus}})
                  : Result<json>(client.status());
  std::string session, error;
  if (answer.ok() && answer->is_object() && answer->contains("id") && (*answer)["id"].is_string() &&
      PlainSessionId((*answer)["id"].get<std::string>())) {
    session = (*answer)["id"].get<std::string>();
  } else {
    error = answer.ok() ? "the node answered without a session id" : answer.status().message();
  }
  if (!host_.SessionOpened(job_id, target->lease_id, session, error) && !session.empty()) {
    // The job ended while the session was being opened: close it again.
    Post([this, url = target->url, session] { (void)DeleteSession(url, session); });
  }
}

void NodeWorker::DoClose(const std::string& job_id) {
  std::optional<SessionTarget> target = host_.SessionToClose(job_id);
  if (!target) return;
  Result<json> stats = target->url.empty()
                           ? Result<json>(Unavailable("the node has no API address"))
                           : DeleteSession(target->url, target->session);
  host_.SessionClosed(job_id, target->session, std::move(stats));
}

}  // namespace flyt::cluster
