// FakeKubeApi (tests only): a small Kubernetes API server over TLS on 127.0.0.1, for testing
// kube::Client and the annotation publisher without a cluster. At start it makes a throwaway CA
// and a server certificate for IP 127.0.0.1 (and a second, unrelated CA, for the "wrong CA"
// case) with the `openssl` command in a directory the test owns.
//
// It serves one Node, GET and PATCH /api/v1/nodes/{name}, and checks what the real API requires of
// a request: the bearer token (401), the path (404), for PATCH the Content-Type
// application/merge-patch+json (415), and a body that is a JSON merge patch of annotations only —
// {"metadata":{"annotations":{key: string|null}}} with valid keys, within the 256 KiB limit on all
// annotations (422). Errors are answered with a Status object as the API documents
// ({"kind":"Status","apiVersion":"v1","status":"Failure","message","reason","code"}). Anything a
// real server would refuse, or that the publisher must not send, is also recorded in
// violations(). A PATCH that passes is merged into the Node (null removes a key) and answered
// 200 with the Node.
//
// Faults are queued: FailNext(403) answers the next request 403, HangNext() holds the next
// request without answering until Release() (or the server stops), so a client times out.
// Thread-safe.
#pragma once

#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace httplib {
class SSLServer;
struct Request;
struct Response;
}  // namespace httplib

namespace flyt::kube::testing {

// Makes ca.crt/ca.key, server.crt/server.key (SAN IP:127.0.0.1) and other-ca.crt in `dir`.
Status MakeTestCertificates(const std::string& dir);

// A fresh directory under the system's temp directory (flyt-<tag>-XXXXXX), removed with all it
// holds when this goes; path() is empty when it could not be made.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "kube");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `text` to `path`, replacing what was there.
void WriteFile(const std::string& path, const std::string& text);

class FakeKubeApi {
 public:
  struct Request {
    std::string method;
    std::string path;
    std::string content_type;
    std::string authorization;
    std::string body;
  };

  // `dir`: an existing directory the test owns (the certificates go there).
  static Result<std::unique_ptr<FakeKubeApi>> Start(const std::string& dir, std::string node_name,
                                                    std::string token);
  ~FakeKubeApi();

  std::string url() const;  // "https://127.0.0.1:<port>"
  std::string ca_file() const { return dir_ + "/ca.crt"; }
  std::string wrong_ca_file() const { return dir_ + "/other-ca.crt"; }

  void SetToken(std::string token);
  void SetLabels(const nlohmann::json& labels);
  void SetAnnotations(const nlohmann::json& annotations);
  nlohmann::json annotations() const;

  // The next request is answered `http_status` with a Status object (any 4xx/5xx).
  void FailNext(int http_status, int times = 1);
  // The next request is held without an answer until Release().
  void HangNext();
  void Release();

  std::vector<Request> requests() const;
  size_t patch_count() const;  // PATCHes that were applied
  std::vector<std::string> violations() const;

 private:
  struct Fault {
    int status = 0;  // 0: hang
  };
  FakeKubeApi(std::string dir, std::string node_name, std::string token);
  void Handle(const httplib::Request& req, httplib::Response& res);
  void SendStatus(httplib::Response& res, int code, const std::string& reason,
                  const std::string& message);
  nlohmann::json NodeJson() const FLYT_REQUIRES(mu_);
  // The problem with a PATCH body, or "" when the API would take it.
  std::string CheckPatch(const nlohmann::json& patch) const FLYT_REQUIRES(mu_);

  const std::string dir_;
  const std::string node_name_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  mutable Mutex mu_;
  CondVar released_cv_;
  std::string token_ FLYT_GUARDED_BY(mu_);
  nlohmann::json labels_ FLYT_GUARDED_BY(mu_) = nlohmann::json::object();
  nlohmann::json annotations_ FLYT_GUARDED_BY(mu_) = nlohmann::json::object();
  uint64_t resource_version_ FLYT_GUARDED_BY(mu_) = 1000;
  std::deque<Fault> faults_ FLYT_GUARDED_BY(mu_);
  bool released_ FLYT_GUARDED_BY(mu_) = false;
  std::vector<Request> requests_ FLYT_GUARDED_BY(mu_);
  size_t patches_ FLYT_GUARDED_BY(mu_) = 0;
  std::vector<std::string> violations_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt::kube::testing
