// The GPU machine the fake CUDA runtime, NCCL and NVML describe, read from the file named by
// MUSTER_FAKE_GPU_MACHINE. One line each:
//   gpu BUS_ID UUID NAME...          a GPU (in CUDA's PCI bus id order)
//   nvlink BUS_ID BUS_ID LINKS       NVLinks between two GPUs
//   nvswitch BUS_ID LINKS            a GPU's NVLinks into NVSwitches
//   cpu BUS_ID LINKS                 a GPU's NVLinks to its CPU (IBM POWER, Grace)
// and, for NVML's health readings, lines that tell where a GPU or the driver is not healthy;
// what no line says is healthy. They follow the `gpu` line of the GPU they name.
//   driver VERSION CUDA_CODE         the driver and the CUDA it supports (550.54.15 12040)
//   ecc BUS_ID VOLATILE AGGREGATE [off]
//                                    uncorrected ECC errors since the driver loaded and over
//                                    the GPU's life (0 0); "off": ECC mode disabled
//   remap BUS_ID CORRECTED UNCORRECTED PENDING FAILED
//                                    rows remapped, and whether a remap waits for a reset or
//                                    failed (0 or 1) (0 0 0 0)
//   retired-pending BUS_ID           retired pages wait for a reset (none do)
//   throttle BUS_ID HEXBITS          the nvmlClocksThrottleReason* bits now (0x1, idle)
//   nvlink-down BUS_ID LINK          that link index exists but is inactive; its NVLink, if
//                                    the lines above gave it one, does not count
//   nvlink-errors BUS_ID LINK REPLAY RECOVERY CRC_FLIT CRC_DATA
//                                    a link's error counters (0 0 0 0)
//   temperature BUS_ID CELSIUS SLOWDOWN
//                                    the GPU's temperature and its slowdown threshold (40 90)
//   persistence BUS_ID off           persistence mode disabled (it is enabled)
//   lost BUS_ID                      the GPU fell off the bus: NVML counts it, cannot open it
//   hang BUS_ID                      NVML never returns from opening it by index, as on a
//                                    wedged GPU (it is found by bus id as usual)
//   clocks BUS_ID SM_MHZ MAX_SM_MHZ  the SM clock now and its maximum (1980 1980)
// and, for the fake CUDA runtime and cuBLAS, how fast a GPU's work runs: copies and GEMMs
// take the time these rates imply, and the events around them report that time.
//   h2d BUS_ID GBPS                  host to device from pinned memory (50)
//   d2h BUS_ID GBPS                  device to host into pinned memory (50)
//   hbm BUS_ID GBPS                  a copy within the GPU, bytes read and written (2000)
//   p2p BUS_ID BUS_ID GBPS           a copy between the two GPUs, either way (20 a shared
//                                    NVLink or an NVSwitch link both have, else 20 for PCIe)
//   gemm BUS_ID TFLOPS               an FP16 or BF16 GEMM through cuBLAS (600)
// '#' starts a comment. No file (or no GPU in it): a machine without GPUs.
#pragma once

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
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
  // What NVML's health readings answer; healthy unless a line says otherwise.
  bool lost = false;
  bool hangs = false;
  bool persistence = true;
  bool ecc_enabled = true;
  unsigned long long ecc_volatile_uncorrected = 0, ecc_aggregate_uncorrected = 0;
  unsigned remap_corrected = 0, remap_uncorrected = 0;
  bool remap_pending = false, remap_failed = false;
  bool retired_pages_pending = false;
  unsigned long long throttle_reasons = 0x1;  // nvmlClocksThrottleReasonGpuIdle
  unsigned temperature_c = 40, slowdown_temperature_c = 90;
  std::set<unsigned> down_links;
  std::map<unsigned, std::array<unsigned long long, 4>> link_errors;  // replay, recovery, CRC flit, CRC data
  unsigned sm_clock_mhz = 1980, max_sm_clock_mhz = 1980;
  // How fast its work runs, in GB/s and TFLOPS.
  double h2d_gbps = 50, d2h_gbps = 50, hbm_gbps = 2000, gemm_tflops = 600;
  std::map<std::string, double> p2p_gbps;  // by the peer's bus id, where a line set it

  // The link indices NVML says this GPU has: its NVLinks and any link marked down.
  unsigned link_count() const {
    const unsigned down = down_links.empty() ? 0 : *down_links.rbegin() + 1;
    return std::max(unsigned(links.size()), down);
  }
  bool link_active(unsigned link) const { return link < links.size() && !down_links.count(link); }
};

struct Driver {
  std::string version = "550.54.15";
  int cuda_version = 12040;  // CUDA 12.4
};

struct Machine {
  std::vector<Gpu> gpus;
  Driver driver;
};

// "0000:17:00.0", whatever case and domain width it was written with.
inline std::string canonical_bus_id(const std::string& text) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return text;
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", domain, bus, device, function);
  return out;
}

inline Machine read_description(std::istream& in) {
  Machine machine;
  std::vector<Gpu>& out = machine.gpus;
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
    } else if (kind == "driver") {
      machine.driver.version = bus;
      words >> machine.driver.cuda_version;
    } else if (Gpu* g = find(bus)) {
      std::string word;
      if (kind == "ecc") {
        words >> g->ecc_volatile_uncorrected >> g->ecc_aggregate_uncorrected;
        if (words >> word) g->ecc_enabled = word != "off";
      } else if (kind == "remap") {
        int pending = 0, failed = 0;
        words >> g->remap_corrected >> g->remap_uncorrected >> pending >> failed;
        g->remap_pending = pending != 0;
        g->remap_failed = failed != 0;
      } else if (kind == "retired-pending") {
        g->retired_pages_pending = true;
      } else if (kind == "throttle") {
        words >> std::hex >> g->throttle_reasons;
      } else if (kind == "nvlink-down") {
        unsigned link = 0;
        if (words >> link) g->down_links.insert(link);
      } else if (kind == "nvlink-errors") {
        unsigned link = 0;
        std::array<unsigned long long, 4> counters{};
        if (words >> link >> counters[0] >> counters[1] >> counters[2] >> counters[3])
          g->link_errors[link] = counters;
      } else if (kind == "temperature") {
        words >> g->temperature_c >> g->slowdown_temperature_c;
      } else if (kind == "persistence") {
        if (words >> word) g->persistence = word != "off";
      } else if (kind == "lost") {
        g->lost = true;
      } else if (kind == "hang") {
        g->hangs = true;
      } else if (kind == "clocks") {
        words >> g->sm_clock_mhz >> g->max_sm_clock_mhz;
      } else if (kind == "h2d") {
        words >> g->h2d_gbps;
      } else if (kind == "d2h") {
        words >> g->d2h_gbps;
      } else if (kind == "hbm") {
        words >> g->hbm_gbps;
      } else if (kind == "gemm") {
        words >> g->gemm_tflops;
      } else if (kind == "p2p") {
        std::string peer;
        double gbps = 0;
        if (words >> peer >> gbps)
          if (Gpu* p = find(peer)) {
            g->p2p_gbps[p->bus_id] = gbps;
            p->p2p_gbps[g->bus_id] = gbps;
          }
      }
    }
  }
  return machine;
}

inline std::vector<Gpu> read_machine(std::istream& in) { return read_description(in).gpus; }

// The rate of a copy between two GPUs: a `p2p` line's, else 20 GB/s for each NVLink they
// share (directly, or through NVSwitches both reach), else 20 GB/s over PCIe.
inline double p2p_gbps(const Gpu& a, const Gpu& b) {
  if (auto it = a.p2p_gbps.find(b.bus_id); it != a.p2p_gbps.end()) return it->second;
  unsigned direct = 0, a_switch = 0, b_switch = 0;
  for (const auto& l : a.links) {
    if (l.to == Link::To::Gpu && l.peer_bus_id == b.bus_id) ++direct;
    if (l.to == Link::To::Switch) ++a_switch;
  }
  for (const auto& l : b.links)
    if (l.to == Link::To::Switch) ++b_switch;
  const unsigned links = direct ? direct : std::min(a_switch, b_switch);
  return links ? 20.0 * links : 20.0;
}

// The machine MUSTER_FAKE_GPU_MACHINE describes, read once.
inline const Machine& description() {
  static const Machine described = [] {
    const char* path = std::getenv("MUSTER_FAKE_GPU_MACHINE");
    std::ifstream in(path ? path : "");
    return read_description(in);
  }();
  return described;
}

inline const std::vector<Gpu>& machine() { return description().gpus; }
inline const Driver& driver() { return description().driver; }

}  // namespace muster::fake_gpu
