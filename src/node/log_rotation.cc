#include "node/log_rotation.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/unique_fd.h"

namespace flyt::node {

Result<bool> RotateLog(const std::string& path, uint64_t max_bytes, int files) {
  UniqueFd log(open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!log.valid()) {
    if (errno == ENOENT) return false;
    return ErrnoError("cannot open " + path, errno);
  }
  struct stat st {};
  if (fstat(log.get(), &st) != 0) return ErrnoError("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size <= max_bytes) return false;
  if (files > 0) {
    // The newest max_bytes, into <path>.1.tmp; then the older files move up by one.
    const std::string tmp = path + ".1.tmp";
    UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid()) return ErrnoError("cannot create " + tmp, errno);
    off_t from = static_cast<off_t>(size - max_bytes);
    uint64_t left = max_bytes;
    std::vector<char> buf(1 << 16);
    while (left > 0) {
      const ssize_t n = pread(log.get(), buf.data(), std::min<uint64_t>(buf.size(), left), from);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Status s = ErrnoError("cannot read " + path, errno);
        unlink(tmp.c_str());
        return s;
      }
      if (n == 0) break;  // truncated meanwhile by someone else
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = write(out.get(), buf.data() + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          Status s = ErrnoError("cannot write " + tmp, errno);
          unlink(tmp.c_str());
          return s;
        }
        done += w;
      }
      from += n;
      left -= static_cast<uint64_t>(n);
    }
    // Truncated right after the copy: what is written until then is lost, not duplicated.
    if (ftruncate(log.get(), 0) != 0) {
      Status s = ErrnoError("cannot truncate " + path, errno);
      unlink(tmp.c_str());
      return s;
    }
    const auto numbered = [&path](int i) { return path + "." + std::to_string(i); };
    unlink(numbered(files).c_str());
    for (int i = files - 1; i >= 1; --i) {
      if (rename(numbered(i).c_str(), numbered(i + 1).c_str()) != 0 && errno != ENOENT) {
        return ErrnoError("cannot rename " + numbered(i), errno);
      }
    }
    if (rename(tmp.c_str(), numbered(1).c_str()) != 0) {
      Status s = ErrnoError("cannot rename " + tmp, errno);
      unlink(tmp.c_str());
      return s;
    }
    return true;
  }
  if (ftruncate(log.get(), 0) != 0) return ErrnoError("cannot truncate " + path, errno);
  return true;
}

}  // namespace flyt::node
