#include "launcher/cluster/job_id.h"

#include <random>

#include <fmt/format.h>

namespace muster {

std::string new_job_id() {
  std::random_device device;
  std::uint64_t value = (std::uint64_t(device()) << 32) ^ device();
  return fmt::format("{:016x}", value);
}

}  // namespace muster
