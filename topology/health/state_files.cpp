#include "topology/health/state_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "launcher/replace_file.h"
#include "topology/health/sysfs_reading.h"

namespace muster {

namespace {

namespace fs = std::filesystem;

// Far above what muster keeps, far below what would slow a health check.
constexpr off_t kMaxFileBytes = 4 << 20;

// Whether `dir` can hold muster's state: a real directory (not a symlink another user could
// point elsewhere), this user's, and writable by no one else.
bool safe_state_dir(const std::string& dir, std::string& why_not) {
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) {
    why_not = fmt::format("state directory {}: {}", dir, std::strerror(errno));
    return false;
  }
  if (S_ISLNK(st.st_mode)) why_not = fmt::format("state directory {} is a symlink: refused", dir);
  else if (!S_ISDIR(st.st_mode)) why_not = fmt::format("state directory {} is not a directory", dir);
  else if (st.st_uid != ::geteuid())
    why_not = fmt::format("state directory {} belongs to uid {}, not this user ({}): refused", dir, st.st_uid,
                          ::geteuid());
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    why_not = fmt::format("state directory {} is writable by others: refused (chmod 700 it)", dir);
  else
    return true;
  return false;
}

}  // namespace

std::optional<std::string> read_state_file(const std::string& state_dir, const std::string& name,
                                           std::string& why_not) {
  why_not.clear();
  struct stat dir{};
  if (::lstat(state_dir.c_str(), &dir) != 0) return std::nullopt;  // nothing kept yet
  if (!safe_state_dir(state_dir, why_not)) return std::nullopt;
  const std::string path = state_dir + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) why_not = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return std::nullopt;
  }
  struct stat st{};
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) why_not = fmt::format("{} is not a regular file", path);
  else if (st.st_uid != ::geteuid()) why_not = fmt::format("{} belongs to uid {}: refused", path, st.st_uid);
  else if (st.st_size > kMaxFileBytes) why_not = fmt::format("{} is larger than {} bytes: refused", path, kMaxFileBytes);
  else {
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!why_not.empty()) return std::nullopt;
  return text;
}

bool write_state_file(const std::string& state_dir, const std::string& name, const std::string& text,
                      std::string& why_not) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(state_dir, ec))) {
    fs::create_directories(state_dir, ec);
    if (ec) {
      why_not = fmt::format("cannot make the state directory {}: {}", state_dir, ec.message());
      return false;
    }
    ::chmod(state_dir.c_str(), 0700);
  }
  if (!safe_state_dir(state_dir, why_not)) return false;
  // Kept across reboots, as the node's own record: on disk before it replaces the old one.
  if (const int error = replace_file(state_dir + "/" + name, text, {.mode = 0600, .sync = true})) {
    why_not = fmt::format("cannot write {}/{}: {}", state_dir, name, std::strerror(error));
    return false;
  }
  return true;
}


std::string state_machine_id(const std::string& root) {
  const std::string id = health::read_line(health::Root{root}.at("/etc/machine-id")).value_or("");
  if (id.empty() || id.size() > 128) return "";
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return "";
  return id;
}

std::string state_file_of_machine(const std::string& root, const std::string& stem, const std::string& suffix) {
  const std::string id = state_machine_id(root);
  return id.empty() ? fmt::format("{}.{}", stem, suffix) : fmt::format("{}.{}.{}", stem, id, suffix);
}

std::optional<std::string> read_machine_state_file(const std::string& state_dir, const std::string& root,
                                                   const std::string& stem, const std::string& suffix,
                                                   std::string& why_not) {
  auto text = read_state_file(state_dir, state_file_of_machine(root, stem, suffix), why_not);
  if (text || !why_not.empty()) return text;
  return read_state_file(state_dir, fmt::format("{}.{}", stem, suffix), why_not);
}

}  // namespace muster
