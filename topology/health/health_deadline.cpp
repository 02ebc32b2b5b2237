// The health checks cut at a deadline: the reading runs on a thread of its own, and a check
// that hangs (NVML on a wedged GPU, a file system that stopped answering) is named.
#include <atomic>
#include <memory>

#include <fmt/format.h>

#include "topology/health/finish_within.h"
#include "topology/health/sysfs_reading.h"

namespace muster {

using health::Status;
using health::finding;

NodeHealth check_node_health_within(const std::string& root, std::shared_ptr<GpuLibraries> gpus,
                                    const HealthExpectations& expect, std::chrono::milliseconds deadline,
                                    const std::string& why_no_gpu_libraries, const std::string& state_dir) {
  // The name of the check under way, shared with the thread, which may outlive this call
  // when a reading hangs; so may the GPU libraries it reads through.
  auto progress = std::make_shared<std::atomic<const char*>>("gpu");
  std::optional<NodeHealth> finished = finish_within<NodeHealth>(deadline, [=] {
    NodeHealth health;
    try {
      health = check_node_health({root, gpus.get(), progress.get(), why_no_gpu_libraries, state_dir}, expect);
    } catch (const std::exception& e) {
      // Nothing a check throws may end the agent: it becomes the node's finding.
      health.complete = false;
      health.findings.push_back(finding(progress->load(), Status::Unknown, "",
                                        std::string("the check could not run: ") + e.what()));
    }
    return health;
  });
  if (finished) return std::move(*finished);
  const std::string stuck = progress->load();
  const bool in_nvml = stuck == "gpu";
  const bool in_cuda = stuck == "gpu_stress";
  HealthFinding hung = finding(stuck, Status::Fail, "",
                               fmt::format("the health checks did not finish within {:g} s: stuck in the {} check "
                                           "({})", deadline.count() / 1e3, stuck,
                                           in_nvml   ? "NVML did not answer"
                                           : in_cuda ? "the CUDA runtime did not return from the GPUs' work"
                                                     : "a read of the node's files did not return"));
  hung.expected = "an answer";
  hung.expected_from = "the health checks' deadline";
  hung.remedy = in_nvml || in_cuda
                    ? "a wedged GPU hangs NVML and CUDA: drain the node; nvidia-smi will hang too; reset the GPU or reboot"
                    : "a file system or driver stopped answering: drain the node and look at dmesg";
  // A hang in NVML leaves the node's files to read: what they say (an Xid 79, a link gone)
  // names the GPU that hung. They are read under a deadline of their own, a quarter of this
  // one, so that the whole stays within what a caller waits for (an agent's 15 s and a
  // quarter are within the head's 20 s). Without NVML this does not come round again; a
  // hang reading the files is then named as such. A hang outside NVML would hang again:
  // then only the hang.
  NodeHealth out;
  if (in_nvml && gpus)
    out = check_node_health_within(root, nullptr, expect, deadline / 4, "NVML hung: see the gpu check above",
                                   state_dir);
  out.complete = false;
  out.findings.insert(out.findings.begin(), std::move(hung));
  return out;
}

}  // namespace muster
