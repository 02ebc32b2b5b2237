// The GPU machine the fake CUDA runtime, NCCL and NVML describe, read from the file named by
// MUSTER_FAKE_GPU_MACHINE. One line each:
//   gpu BUS_ID UUID NAME...          a GPU (in CUDA's PCI bus id order)
//   nvlink BUS_ID BUS_ID LINKS       NVLinks between two GPUs
//   nvswitch BUS_ID LINKS            a GPU's NVLinks into NVSwitches
//   cpu BUS_ID LINKS                 a GPU's NVLinks to its CPU (IBM POWER, Grace)
// '#' starts a comment. No file (or no GPU in it): a machine without GPUs.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace muster::fake_gpu {

struct Link {
  enum class To { Gpu, Switch, Cpu } to = To::Gpu;
  std::string peer_bus_id;  // for To::Gpu
};

struct Gpu {
  std::string bus_id, uuid, name;
  std::vector<Link> links;  // one entry per NVLink, in link order
};

// "0000:17:00.0", whatever case and domain width it was written with.
inline std::string canonical_bus_id(const std::string& text) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return text;
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", domain, bus, device, function);
  return out;
}

inline std::vector<Gpu> read_machine(std::istream& in) {
  std::vector<Gpu> out;
  auto find = [&](const std::string& bus) -> Gpu* {
    for (auto& g : out)
      if (g.bus_id == canonical_bus_id(bus)) return &g;
    return nullptr;
  };
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string kind, bus;
    if (!(words >> kind >> bus)) continue;
    if (kind == "gpu") {
      Gpu g;
      g.bus_id = canonical_bus_id(bus);
      words >> g.uuid >> std::ws;
      std::getline(words, g.name);
      out.push_back(g);
    } else if (kind == "nvlink") {
      std::string peer;
      int links = 0;
      words >> peer >> links;
      Gpu *a = find(bus), *b = find(peer);
      for (int i = 0; a && b && i < links; ++i) {
        a->links.push_back({Link::To::Gpu, b->bus_id});
        b->links.push_back({Link::To::Gpu, a->bus_id});
      }
    } else if (kind == "nvswitch" || kind == "cpu") {
      int links = 0;
      words >> links;
      if (Gpu* g = find(bus))
        for (int i = 0; i < links; ++i)
          g->links.push_back({kind == "cpu" ? Link::To::Cpu : Link::To::Switch, ""});
    }
  }
  return out;
}

// The machine MUSTER_FAKE_GPU_MACHINE describes, read once.
inline const std::vector<Gpu>& machine() {
  static const std::vector<Gpu> gpus = [] {
    const char* path = std::getenv("MUSTER_FAKE_GPU_MACHINE");
    std::ifstream in(path ? path : "");
    return read_machine(in);
  }();
  return gpus;
}

}  // namespace muster::fake_gpu
