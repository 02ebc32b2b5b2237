#include "topology/health/counter_baseline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "topology/health/sysfs_reading.h"

namespace muster {

namespace {

namespace fs = std::filesystem;

constexpr const char* kFileName = "counters.baseline";
constexpr const char* kHeader = "muster-counter-baseline 1";
// Far above a node's devices and Xids, far below what would slow a health check.
constexpr off_t kMaxFileBytes = 4 << 20;
constexpr size_t kMaxEntries = 100000;

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

bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > 256) return false;
  for (char c : key)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  return true;
}

}  // namespace

std::string health_state_dir() {
  if (const char* dir = std::getenv("MUSTER_STATE_DIR"); dir && *dir) return dir;
  if (::geteuid() == 0) return "/var/lib/muster";
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg == '/') return std::string(xdg) + "/muster";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/") + "/.local/state/muster";
}

std::optional<std::string> read_boot_id(const std::string& root) {
  auto id = health::read_line(health::Root{root}.at("/proc/sys/kernel/random/boot_id"));
  if (!id || id->empty() || !valid_key(*id)) return std::nullopt;
  return id;
}

std::optional<CounterBaseline> load_counter_baseline(const std::string& state_dir, std::string& why_not) {
  why_not.clear();
  const std::string path = state_dir + "/" + kFileName;
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
  std::istringstream in(text);
  std::string line;
  CounterBaseline b;
  bool header = false, boot = false, recorded = false;
  while (std::getline(in, line)) {
    if (!header) {
      header = line == kHeader;
      if (!header) break;
      continue;
    }
    std::istringstream words(line);
    std::string key, value, extra;
    if (!(words >> key >> value) || (words >> extra)) continue;
    if (key == "boot_id") b.boot_id = value, boot = true;
    else if (key == "recorded_at") {
      char* end = nullptr;
      b.recorded_at = std::time_t(std::strtoll(value.c_str(), &end, 10));
      recorded = end && *end == '\0';
    } else if (valid_key(key) && b.counts.size() < kMaxEntries) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
      if (end && *end == '\0') b.counts[key] = v;
    }
  }
  if (!header || !boot || !recorded) {
    why_not = fmt::format("{} is not a muster counter baseline: ignored", path);
    return std::nullopt;
  }
  return b;
}

bool save_counter_baseline(const std::string& state_dir, const CounterBaseline& baseline, std::string& why_not) {
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
  std::string text = fmt::format("{}\nboot_id {}\nrecorded_at {}\n", kHeader, baseline.boot_id,
                                 static_cast<long long>(baseline.recorded_at));
  for (const auto& [key, value] : baseline.counts)
    if (valid_key(key)) text += fmt::format("{} {}\n", key, value);
  std::string temp = state_dir + "/" + kFileName + ".XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    why_not = fmt::format("cannot write in {}: {}", state_dir, std::strerror(errno));
    return false;
  }
  ::fchmod(fd, 0600);
  size_t put = 0;
  while (put < text.size()) {
    const ssize_t n = ::write(fd, text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    put += size_t(n);
  }
  const bool written = put == text.size() && ::fsync(fd) == 0;
  const int write_error = errno;
  ::close(fd);
  if (!written || ::rename(temp.c_str(), (state_dir + "/" + kFileName).c_str()) != 0) {
    why_not = fmt::format("cannot write {}/{}: {}", state_dir, kFileName, std::strerror(written ? errno : write_error));
    ::unlink(temp.c_str());
    return false;
  }
  return true;
}

std::string baseline_time_text(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

}  // namespace muster
