// Writing a file whole, so that a reader (node_exporter's textfile collector, a CI step, the
// next health check) sees the old contents or the new, never half: written beside its final
// name, then renamed over it. muster often runs as root, into directories others can write (a
// shared /tmp, the exporter's directory): the temporary file gets a name no one can guess and
// is created with O_EXCL (mkostemp), so a link planted at any name is never followed, and
// rename() replaces a link at the final name rather than writing where it points.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace muster {

struct ReplaceFile {
  mode_t mode = 0600;  // before the umask, where honour_umask
  bool honour_umask = false;
  bool sync = false;  // on disk before the rename: state that must survive a crash
};

// Replaces `path` with `text`; 0, or the errno of what failed (nothing is left behind then).
inline int replace_file(const std::string& path, const std::string& text, const ReplaceFile& how = {}) {
  const size_t slash = path.rfind('/');
  std::string temporary = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/." +
                          path.substr(slash == std::string::npos ? 0 : slash + 1) + ".XXXXXX";
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) return errno;
  mode_t mode = how.mode;
  if (how.honour_umask) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode &= ~mask;
  }
  int error = ::fchmod(fd, mode) == 0 ? 0 : errno;
  for (size_t done = 0; error == 0 && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = n < 0 ? errno : EIO;
    else done += size_t(n);
  }
  if (error == 0 && how.sync && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) ::unlink(temporary.c_str());
  return error;
}

}  // namespace muster
