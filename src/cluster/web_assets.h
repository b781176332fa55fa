// WebAssets: the built dashboard (web/ bundled by esbuild: index.html, app.js, app.css, ...),
// read into memory once at start and served by flyt-cluster-manager itself at /.
//
// Only the files of one flat directory are served, by exact name: no path from a request ever
// reaches the file system. Each file carries a strong ETag (a hash of its bytes), so a browser
// revalidates cheaply and sees a new build at once. Immutable after Load; thread-safe.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace flyt::cluster {

class WebAssets {
 public:
  struct File {
    std::string body;
    std::string content_type;
    std::string etag;  // quoted, as the header carries it
  };

  // Reads the regular files of `dir` (not its subdirectories). Fails when the directory or its
  // index.html is missing, or it holds more than 64 files / 32 MiB.
  static Result<WebAssets> Load(const std::string& dir);
  // The dashboard's directory when none is configured: next to the running program,
  // <bin>/../share/flyt/web (installed, and the build tree too); "" when it has no index.html.
  static std::string FindDefaultDir();

  // `name`: a file name such as "app.js" ("" means index.html). nullptr when there is none.
  const File* Find(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  size_t size() const { return files_.size(); }

 private:
  std::string dir_;
  std::map<std::string, File> files_;
};

}  // namespace flyt::cluster
