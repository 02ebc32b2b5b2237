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

#include "topology/health/state_files.h"
#include "topology/health/sysfs_reading.h"

namespace muster {

namespace {

namespace fs = std::filesystem;

// counters.<machine-id>.baseline
constexpr const char* kFileStem = "counters";
constexpr const char* kFileSuffix = "baseline";
constexpr const char* kHeader = "muster-counter-baseline 1";
// Far above a node's devices and Xids.
constexpr size_t kMaxEntries = 100000;

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

std::optional<CounterBaseline> load_counter_baseline(const std::string& state_dir, const std::string& root,
                                                     std::string& why_not) {
  auto text = read_machine_state_file(state_dir, root, kFileStem, kFileSuffix, why_not);
  if (!text) return std::nullopt;
  const std::string path = state_dir + "/" + state_file_of_machine(root, kFileStem, kFileSuffix);
  std::istringstream in(*text);
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

bool save_counter_baseline(const std::string& state_dir, const std::string& root, const CounterBaseline& baseline,
                           std::string& why_not) {
  std::string text = fmt::format("{}\nboot_id {}\nrecorded_at {}\n", kHeader, baseline.boot_id,
                                 static_cast<long long>(baseline.recorded_at));
  for (const auto& [key, value] : baseline.counts)
    if (valid_key(key)) text += fmt::format("{} {}\n", key, value);
  return write_state_file(state_dir, state_file_of_machine(root, kFileStem, kFileSuffix), text, why_not);
}

std::string baseline_time_text(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

}  // namespace muster
