#include "tests/support/build_paths.h"
#include "tests/support/fake_gpus.h"

#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace muster::testing {

std::string FakeGpuMachine::nccl_unavailable_reason() {
  if (std::string(fake_nccl_dir()).empty())
    return "the fake CUDA runtime and NCCL were not built: /usr/local/cuda/include has no nccl.h "
           "and cuda_runtime_api.h to build them against";
  return "";
}

FakeGpuMachine::FakeGpuMachine(const std::string& name)
    : description_(fake_gpu_machine_file(name)) {
  std::ifstream in(description_);
  if (!in) throw std::runtime_error("no machine description " + description_);
  gpus_ = fake_gpu::read_machine(in);

  // This machine as lstopo exports it, with each GPU behind a host bridge of its own: hwloc
  // takes a PCI device of class 0302 from vendor 10de for an NVIDIA GPU, as on a real node.
  CommandResult lstopo = run_command({"lstopo", "--of", "xml", "-"});
  if (lstopo.exit_code != 0) throw std::runtime_error("lstopo --of xml failed: " + lstopo.err);
  std::string bridges;
  int gp_index = 1'000'000;  // above any that lstopo numbered
  for (const auto& gpu : gpus_) {
    const std::string domain = gpu.bus_id.substr(0, 4), bus = gpu.bus_id.substr(5, 2);
    bridges += fmt::format(
        "    <object type=\"Bridge\" gp_index=\"{}\" bridge_type=\"0-1\" depth=\"0\" "
        "bridge_pci=\"{}:[{}-{}]\">\n"
        "      <object type=\"PCIDev\" gp_index=\"{}\" pci_busid=\"{}\" "
        "pci_type=\"0302 [10de:2330] [10de:16c1] a1 00\" pci_link_speed=\"31.5\"/>\n"
        "    </object>\n",
        gp_index, domain, bus, bus, gp_index + 1, gpu.bus_id);
    gp_index += 2;
  }
  // The last </object> closes the Machine: the bridges become its last children.
  const size_t machine_end = lstopo.out.rfind("</object>");
  if (machine_end == std::string::npos) throw std::runtime_error("lstopo wrote no topology");
  xml_ = dir_.file(name + ".xml");
  dir_.write(name + ".xml", lstopo.out.insert(machine_end, bridges));
}

std::vector<std::string> FakeGpuMachine::environment() const {
  return {"HWLOC_XMLFILE=" + xml_,
          "HWLOC_THISSYSTEM=1",  // the export is this machine: bind to it, ask NVML about it
          fmt::format("LD_LIBRARY_PATH={}", fake_gpu_dir()),
          "MUSTER_FAKE_GPU_MACHINE=" + description_};
}

std::string fake_gpu_machine_file(const std::string& name) {
  return source_path("/tests/fakes/gpu/machines/" + name + ".txt");
}

std::vector<std::string> fake_gpu_libraries(const std::string& name) {
  return {fmt::format("LD_LIBRARY_PATH={}", fake_gpu_dir()), "MUSTER_FAKE_GPU_MACHINE=" + fake_gpu_machine_file(name)};
}

}  // namespace muster::testing
