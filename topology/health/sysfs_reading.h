// What every family of health checks shares: reading a node's files under a root directory
// (bounded, since a snapshot's files need not be what the kernel writes) and making a
// finding. Internal to topology/health/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "topology/health/health.h"

namespace muster::health {

namespace fs = std::filesystem;

using Status = HealthStatus;

// A path of the node's, read under the root the checks were given.
struct Root {
  std::string dir;
  fs::path at(const std::string& absolute) const {
    return dir.empty() || dir == "/" ? fs::path(absolute) : fs::path(dir) / absolute.substr(1);
  }
};

// A positive number followed by `unit` and anything ("16.0 GT/s PCIe", "200 Gb/sec (4X HDR)").
std::optional<double> number_in(const std::string& text, const char* unit);

// The first line of a small attribute file, at most 4 KiB of it, trailing space removed.
std::optional<std::string> read_line(const fs::path& path);
// The first line as a hexadecimal number ("0x10de").
std::optional<unsigned long> read_hex(const fs::path& path);
// The first line as a decimal count.
std::optional<std::uint64_t> read_count(const fs::path& path);
// The entries of a directory, sorted; nullopt when it cannot be listed.
std::optional<std::vector<std::string>> list_dir(const fs::path& dir);
// The PCI function a class entry's `device` link points at ("0000:3b:00.0"), or "".
std::string pci_function_of(const fs::path& class_entry);
// Whether a name is a PCI function's address ("0000:3b:00.0").
bool looks_like_bus_id(const std::string& name);

// A finding with what every finding has; the caller adds what was expected and the remedy.
HealthFinding finding(std::string check, Status status, std::string device, std::string observed);

}  // namespace muster::health
