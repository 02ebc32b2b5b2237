#include "topology/health/sysfs_reading.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace muster::health {

// A positive number followed by `unit` and anything ("16.0 GT/s PCIe", "200 Gb/sec (4X HDR)").
std::optional<double> number_in(const std::string& text, const char* unit) {
  double value = 0;
  char found[8] = {};
  if (std::sscanf(text.c_str(), "%lf %7s", &value, found) != 2 || std::strcmp(found, unit) != 0 || value <= 0)
    return std::nullopt;
  return value;
}


// The first line of a small attribute file, at most 4 KiB of it: sysfs bounds what it
// writes, a snapshot's files need not.
std::optional<std::string> read_line(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  char buffer[4096];
  in.read(buffer, sizeof buffer);
  std::string line(buffer, size_t(in.gcount()));
  line = line.substr(0, line.find('\n'));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::optional<unsigned long> read_hex(const fs::path& path) {
  auto text = read_line(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long v = std::strtoul(text->c_str(), &end, 16);
  return end && *end == '\0' ? std::optional(v) : std::nullopt;
}

std::optional<std::uint64_t> read_count(const fs::path& path) {
  auto text = read_line(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text->c_str(), &end, 10);
  return end && *end == '\0' ? std::optional<std::uint64_t>(v) : std::nullopt;
}

// The entries of a directory, sorted; nullopt when it cannot be listed.
std::optional<std::vector<std::string>> list_dir(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return std::nullopt;
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    names.push_back(it->path().filename().string());
    if (names.size() > 65536) break;  // bounded, whatever the snapshot holds
  }
  if (ec) return std::nullopt;  // a listing cut short tells nothing whole
  std::sort(names.begin(), names.end());
  return names;
}

// The PCI function a class entry's `device` link points at ("0000:3b:00.0"), or "".
std::string pci_function_of(const fs::path& class_entry) {
  std::error_code ec;
  fs::path target = fs::read_symlink(class_entry / "device", ec);
  if (ec) return "";
  std::string name = target.filename().string();
  return name.size() >= 12 && name[4] == ':' ? name : "";
}

bool looks_like_bus_id(const std::string& name) {
  unsigned d = 0, b = 0, dev = 0, f = 0;
  char tail = 0;
  return std::sscanf(name.c_str(), "%x:%x:%x.%x%c", &d, &b, &dev, &f, &tail) == 4 && name.size() >= 12;
}

HealthFinding finding(std::string check, Status status, std::string device, std::string observed) {
  HealthFinding f;
  f.check = std::move(check);
  f.status = status;
  f.device = std::move(device);
  f.observed = std::move(observed);
  return f;
}

}  // namespace muster::health
