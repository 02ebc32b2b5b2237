// The node's software inventory (driver, CUDA, NCCL, kernel, RDMA providers), compared
// across nodes by the head, and the driver against the cluster file's expectation.
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/health/checks.h"

namespace muster::health {

namespace {

std::string rdma_providers(const Root& root) {
  std::vector<std::string> out;
  const fs::path dir = root.at("/etc/libibverbs.d");
  for (const auto& name : list_dir(dir).value_or(std::vector<std::string>{})) {
    auto line = read_line(dir / name);
    if (line && line->rfind("driver ", 0) == 0) out.push_back(line->substr(7));
  }
  return fmt::format("{}", fmt::join(out, ","));
}

}  // namespace

void read_software(const NodeReading& node, NodeHealth& out) {
  const Root& root = node.root;
  GpuLibraries* libraries = node.sources.gpus;
  const HealthExpectations& expect = node.expect;
  NodeSoftware& s = out.software;
  s.kernel = read_line(root.at("/proc/sys/kernel/osrelease")).value_or("");
  if (s.nvidia_driver.empty()) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
    if (auto v = read_line(root.at("/proc/driver/nvidia/version"))) {
      std::istringstream words(*v);
      for (std::string w; words >> w;)
        if (w == "Module" && words >> w) s.nvidia_driver = w;
    }
  }
  s.rdma_providers = rdma_providers(root);
  // The board a node was bought as: what it still is after it lost a GPU or a port.
  const std::string vendor = read_line(root.at("/sys/class/dmi/id/sys_vendor")).value_or("");
  const std::string product = read_line(root.at("/sys/class/dmi/id/product_name")).value_or("");
  if (!product.empty()) s.hardware_model = vendor.empty() ? product : vendor + " " + product;
  if (expect.driver_version && s.nvidia_driver != *expect.driver_version) {
    HealthFinding f = finding("software", s.nvidia_driver.empty() ? Status::Unknown : Status::Fail, "",
                              s.nvidia_driver.empty() ? "no NVIDIA driver version readable (NVML, /proc/driver/nvidia)"
                                                      : "NVIDIA driver " + s.nvidia_driver);
    f.expected = *expect.driver_version;
    f.expected_from = expect.from("driver_version");
    f.remedy = "install the expected driver on this node";
    out.findings.push_back(f);
  }
  std::vector<std::string> parts;
  if (!s.nvidia_driver.empty()) parts.push_back("NVIDIA driver " + s.nvidia_driver);
  if (!s.cuda_driver.empty()) parts.push_back("CUDA " + s.cuda_driver);
  if (libraries && (s.nvidia_gpus > 0 || !s.nvidia_driver.empty())) {
    NcclReading nccl = libraries->read_nccl();
    if (nccl.version) {
      s.nccl = nccl_version_text(*nccl.version);
      s.nccl_net_plugin = nccl.net_plugin ? "yes" : "no";
      parts.push_back(fmt::format("NCCL {} ({} net plugin)", s.nccl, nccl.net_plugin ? "with a" : "no"));
    } else {
      parts.push_back("no NCCL (" + nccl.why_not + ")");
    }
  }
  parts.push_back("kernel " + (s.kernel.empty() ? std::string("?") : s.kernel));
  if (!s.rdma_providers.empty()) parts.push_back("RDMA " + s.rdma_providers);
  out.findings.push_back(finding("software", Status::Pass, "", fmt::format("{}", fmt::join(parts, ", "))));
}

}  // namespace muster::health
