#include "kube/test_api_server.h"

#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/http.h"
#include "common/json.h"
#include "common/strings.h"
#include "kube/client.h"

namespace flyt::kube::testing {
namespace {

using nlohmann::json;

constexpr size_t kMaxAnnotationsBytes = 256 * 1024;  // the API's limit on all of a Node's

bool ValidQualifiedName(const std::string& key) {
  std::string name = key;
  if (size_t slash = key.find('/'); slash != std::string::npos) {
    if (!ValidNodeName(key.substr(0, slash))) return false;  // a DNS subdomain, as node names
    name = key.substr(slash + 1);
  }
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

const char* ReasonFor(int code) {
  switch (code) {
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 503:
      return "ServiceUnavailable";
    default:
      return code >= 500 ? "InternalError" : "BadRequest";
  }
}

}  // namespace

TempDir::TempDir(const std::string& tag) {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / ("flyt-" + tag + "-XXXXXX")).string();
  path_ = mkdtemp(tmpl.data()) ? tmpl : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

Status MakeTestCertificates(const std::string& dir) {
  // EC keys: quick to make. The CA is marked as one; the server certificate names 127.0.0.1.
  const std::string script =
      "set -e; cd '" + dir +
      "'; "
      "printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext; "
      "for ca in ca other-ca; do "
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-keyout $ca.key -out $ca.crt -subj \"/CN=flyt test $ca\" "
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign; "
      "done; "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key "
      "-out server.csr -subj /CN=127.0.0.1; "
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile server.ext -out server.crt";
  const std::string command = "sh -c \"$FLYT_CERT_SCRIPT\" >'" + dir + "/openssl.log' 2>&1";
  setenv("FLYT_CERT_SCRIPT", script.c_str(), 1);
  const int rc = std::system(command.c_str());
  unsetenv("FLYT_CERT_SCRIPT");
  if (rc != 0) {
    auto log = ReadFile(dir + "/openssl.log", 1 << 16);
    return Internal("openssl could not make the test certificates: " +
                    (log.ok() ? *log : std::string("(no log)")));
  }
  return Status::Ok();
}

FakeKubeApi::FakeKubeApi(std::string dir, std::string node_name, std::string token)
    : dir_(std::move(dir)), node_name_(std::move(node_name)), token_(std::move(token)) {}

Result<std::unique_ptr<FakeKubeApi>> FakeKubeApi::Start(const std::string& dir,
                                                        std::string node_name, std::string token) {
  FLYT_RETURN_IF_ERROR(MakeTestCertificates(dir));
  std::unique_ptr<FakeKubeApi> api(new FakeKubeApi(dir, std::move(node_name), std::move(token)));
  const std::string cert = dir + "/server.crt";
  const std::string key = dir + "/server.key";
  api->server_ = std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
  if (!api->server_->is_valid())
    return Internal("the test TLS server did not take its certificate");
  FakeKubeApi* self = api.get();
  auto handler = [self](const httplib::Request& req, httplib::Response& res) {
    self->Handle(req, res);
  };
  api->server_->Get(".*", handler);
  api->server_->Patch(".*", handler);
  api->server_->Post(".*", handler);
  api->server_->Put(".*", handler);
  FLYT_ASSIGN_OR_RETURN(api->port_, http::Listen(*api->server_, "127.0.0.1", 0, api->thread_));
  return api;
}

FakeKubeApi::~FakeKubeApi() {
  Release();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string FakeKubeApi::url() const { return "https://127.0.0.1:" + std::to_string(port_); }

void FakeKubeApi::SetToken(std::string token) {
  MutexLock lock(mu_);
  token_ = std::move(token);
}

void FakeKubeApi::SetLabels(const json& labels) {
  MutexLock lock(mu_);
  labels_ = labels;
}

void FakeKubeApi::SetAnnotations(const json& annotations) {
  MutexLock lock(mu_);
  annotations_ = annotations;
}

json FakeKubeApi::annotations() const {
  MutexLock lock(mu_);
  return annotations_;
}

void FakeKubeApi::FailNext(int http_status, int times) {
  MutexLock lock(mu_);
  for (int i = 0; i < times; ++i) faults_.push_back(Fault{http_status});
}

void FakeKubeApi::HangNext() {
  MutexLock lock(mu_);
  released_ = false;
  faults_.push_back(Fault{0});
}

void FakeKubeApi::Release() {
  MutexLock lock(mu_);
  released_ = true;
  released_cv_.NotifyAll();
}

std::vector<FakeKubeApi::Request> FakeKubeApi::requests() const {
  MutexLock lock(mu_);
  return requests_;
}

size_t FakeKubeApi::patch_count() const {
  MutexLock lock(mu_);
  return patches_;
}

std::vector<std::string> FakeKubeApi::violations() const {
  MutexLock lock(mu_);
  return violations_;
}

json FakeKubeApi::NodeJson() const {
  return {{"kind", "Node"},
          {"apiVersion", "v1"},
          {"metadata",
           {{"name", node_name_},
            {"uid", "6f1c2a9e-0000-4000-8000-000000000001"},
            {"resourceVersion", std::to_string(resource_version_)},
            {"labels", labels_},
            {"annotations", annotations_}}},
          {"spec", json::object()},
          {"status", {{"capacity", {{"nvidia.com/gpu", "2"}}}}}};
}

void FakeKubeApi::SendStatus(httplib::Response& res, int code, const std::string& reason,
                             const std::string& message) {
  json status = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
                 {"status", "Failure"}, {"message", message}, {"reason", reason},
                 {"code", code}};
  res.status = code;
  res.set_content(DumpJson(status), "application/json");
}

std::string FakeKubeApi::CheckPatch(const json& patch) const {
  if (!patch.is_object() || patch.size() != 1 || !patch.contains("metadata")) {
    return "the patch must hold only \"metadata\"";
  }
  const json& meta = patch["metadata"];
  if (!meta.is_object() || meta.size() != 1 || !meta.contains("annotations")) {
    return "the patch's metadata must hold only \"annotations\"";
  }
  const json& ann = meta["annotations"];
  if (!ann.is_object() || ann.empty()) return "metadata.annotations must be a non-empty object";
  json merged = annotations_;
  for (const auto& [key, value] : ann.items()) {
    if (!ValidQualifiedName(key)) {
      return "metadata.annotations: Invalid value: \"" + key + "\": not a qualified name";
    }
    if (!value.is_string() && !value.is_null()) {
      return "metadata.annotations[" + key + "]: must be a string or null";
    }
    if (value.is_null()) {
      merged.erase(key);
    } else {
      merged[key] = value;
    }
  }
  size_t total = 0;
  for (const auto& [key, value] : merged.items())
    total += key.size() + value.get<std::string>().size();
  if (total > kMaxAnnotationsBytes) {
    return "metadata.annotations: Too long: must have at most 262144 bytes";
  }
  return "";
}

void FakeKubeApi::Handle(const httplib::Request& req, httplib::Response& res) {
  MutexLock lock(mu_);
  requests_.push_back(Request{req.method, req.path, req.get_header_value("Content-Type"),
                              req.get_header_value("Authorization"), req.body});
  if (!faults_.empty()) {
    const Fault fault = faults_.front();
    faults_.pop_front();
    if (fault.status == 0) {
      // Held: the client's timeout ends the wait on its side; the server's ends at Release().
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!released_ && released_cv_.WaitUntil(mu_, until)) {
      }
      res.status = 504;
      return;
    }
    SendStatus(res, fault.status, ReasonFor(fault.status),
               "injected failure " + std::to_string(fault.status));
    return;
  }
  if (req.get_header_value("Authorization") != "Bearer " + token_) {
    SendStatus(res, 401, "Unauthorized", "Unauthorized");
    return;
  }
  const std::string node_path = "/api/v1/nodes/" + node_name_;
  if (req.path != node_path) {
    violations_.push_back(req.method + " " + req.path + ": not this node's path");
    SendStatus(res, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  if (req.method == "GET") {
    res.status = 200;
    res.set_content(DumpJson(NodeJson()), "application/json");
    return;
  }
  if (req.method != "PATCH") {
    violations_.push_back(req.method + " " + req.path + ": only GET and PATCH are expected");
    SendStatus(res, 405, "MethodNotAllowed", "the server does not allow this method");
    return;
  }
  if (req.get_header_value("Content-Type") != kMergePatchContentType) {
    violations_.push_back("PATCH with Content-Type " + req.get_header_value("Content-Type"));
    SendStatus(res, 415, "UnsupportedMediaType",
               "the body of the request was in an unknown format - accepted media types include: "
               "application/json-patch+json, application/merge-patch+json, "
               "application/apply-patch+yaml");
    return;
  }
  auto patch = ParseJson(req.body, "the patch");
  std::string problem = patch.ok() ? CheckPatch(*patch) : patch.status().message();
  if (!problem.empty()) {
    violations_.push_back("PATCH body " + req.body + ": " + problem);
    SendStatus(res, 422, "Invalid", "Node \"" + node_name_ + "\" is invalid: " + problem);
    return;
  }
  for (const auto& [key, value] : (*patch)["metadata"]["annotations"].items()) {
    if (value.is_null()) {
      annotations_.erase(key);
    } else {
      annotations_[key] = value;
    }
  }
  ++patches_;
  ++resource_version_;
  res.status = 200;
  res.set_content(DumpJson(NodeJson()), "application/json");
}

}  // namespace flyt::kube::testing
