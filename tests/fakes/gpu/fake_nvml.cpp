// A fake libnvidia-ml.so.1: NVML's entry points that muster calls, answering from the
// machine description (fake_machine.h). nvml.h is not installed here, so the declarations
// are muster's own (topology/nvml_api.h), taken from NVML's documentation.
#include <cstring>

#include "tests/fakes/gpu/fake_machine.h"
#include "topology/nvml_api.h"

using namespace muster::nvml_api;
using muster::fake_gpu::Gpu;
using muster::fake_gpu::Link;
using muster::fake_gpu::machine;

namespace {

bool initialised = false;

const Gpu* gpu_of(nvmlDevice_t device) { return reinterpret_cast<const Gpu*>(device); }

nvmlReturn_t copy_text(const std::string& text, char* out, unsigned size) {
  if (!out || text.size() + 1 > size) return kInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return kSuccess;
}

const Link* link_of(nvmlDevice_t device, unsigned link) {
  const Gpu* g = gpu_of(device);
  return g && link < g->links.size() ? &g->links[link] : nullptr;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  if (machine().empty()) return kDriverNotLoaded;  // no GPU: as a machine without the driver
  initialised = true;
  return kSuccess;
}

nvmlReturn_t nvmlShutdown() {
  initialised = false;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  if (!initialised) return kDriverNotLoaded;
  if (!bus_id || !device) return kInvalidArgument;
  for (const Gpu& g : machine())
    if (g.bus_id == muster::fake_gpu::canonical_bus_id(bus_id)) {
      *device = reinterpret_cast<nvmlDevice_t>(const_cast<Gpu*>(&g));
      return kSuccess;
    }
  return kNotFound;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  return gpu_of(device) ? copy_text(gpu_of(device)->name, name, length) : kInvalidArgument;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  return gpu_of(device) ? copy_text(gpu_of(device)->uuid, uuid, length) : kInvalidArgument;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int* is_active) {
  if (!gpu_of(device) || link >= kMaxLinks || !is_active) return kInvalidArgument;
  *is_active = link_of(device, link) != nullptr;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link, nvmlPciInfo_t* pci) {
  const Link* l = link_of(device, link);
  if (!l || !pci) return kInvalidArgument;
  std::memset(pci, 0, sizeof *pci);
  // NVML writes an 8-digit domain; switches and CPUs get bus ids of their own.
  const std::string bus = l->to == Link::To::Gpu ? "0000" + l->peer_bus_id
                          : l->to == Link::To::Switch ? "00000000:c0:00.0" : "00000000:00:01.0";
  std::snprintf(pci->busId, sizeof pci->busId, "%s", bus.c_str());
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", bus.c_str() + 4);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned link, int* type) {
  const Link* l = link_of(device, link);
  if (!l || !type) return kInvalidArgument;
  *type = l->to == Link::To::Gpu ? kLinkToGpu : l->to == Link::To::Switch ? kLinkToSwitch : kLinkToIbmNpu;
  return kSuccess;
}

}  // extern "C"
