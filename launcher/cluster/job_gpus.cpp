#include "launcher/cluster/job_gpus.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "launcher/cluster/hostlist.h"

namespace muster {
namespace {

constexpr std::uint16_t kNvidia = 0x10de;

std::string without_blanks(std::string_view word) {
  const size_t first = word.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  return std::string(word.substr(first, word.find_last_not_of(" \t") - first + 1));
}

// The compute GPUs' indices into `gpus`, in bus order.
std::vector<int> compute_gpus(const std::vector<Gpu>& gpus) {
  std::vector<int> nvidia, all;
  for (size_t i = 0; i < gpus.size(); ++i) {
    all.push_back(int(i));
    if (gpus[i].vendor_id == kNvidia) nvidia.push_back(int(i));
  }
  return nvidia.empty() ? all : nvidia;
}

// What strtoul reads of a word, as CUDA does: an optional sign and leading digits ("1abc" is
// 1); -1 when there are none or the number is negative.
long leading_number(const std::string& word) {
  size_t at = word.find_first_not_of(" \t");
  if (at == std::string::npos) return -1;
  bool negative = false;
  if (word[at] == '+' || word[at] == '-') negative = word[at++] == '-';
  const size_t digits = word.find_first_not_of("0123456789", at);
  const std::string number = word.substr(at, digits == std::string::npos ? std::string::npos : digits - at);
  if (number.empty() || number.size() > 9) return -1;
  return negative ? -1 : std::stol(number);
}

// CUDA_VISIBLE_DEVICES as the CUDA runtime reads it, over `universe` (indices into `gpus`
// in the order CUDA's ordinals count them). A list that begins with "GPU-" holds UUIDs (each
// may be a unique prefix) and ends at the first word that is not one; otherwise ordinals,
// ending at the first that is negative, not a number or past the last device. Naming a device
// twice hides them all. MIG devices are not GPUs muster can place ranks on.
void read_cuda_list(const std::string& value, const std::vector<int>& universe,
                    const std::vector<Gpu>& gpus, JobGpus& out) {
  const bool uuids = value.rfind("GPU-", 0) == 0;
  for (const auto& piece : split_outside_brackets(value, ',')) {
    const std::string word = uuids ? piece : without_blanks(piece);
    int gpu = -1;
    if (uuids && word.rfind("GPU-", 0) == 0) {
      for (int i : universe)
        if (gpus[size_t(i)].uuid && gpus[size_t(i)].uuid->rfind(word, 0) == 0) gpu = gpu == -1 ? i : -2;
    } else if (!uuids && word.rfind("MIG-", 0) != 0) {
      const long n = leading_number(word);
      if (n >= 0 && size_t(n) < universe.size()) gpu = universe[size_t(n)];
    }
    if (gpu < 0) {
      if (!word.empty()) out.unmatched = word;
      return;
    }
    if (std::find(out.gpus.begin(), out.gpus.end(), gpu) != out.gpus.end()) {
      out.gpus.clear();
      out.unmatched = word + " (named twice: CUDA then shows no device)";
      return;
    }
    out.gpus.push_back(gpu);
  }
}

// Slurm's gres indices: the node's compute GPUs in bus order.
std::vector<int> slurm_gpus(const std::string& value, const std::vector<int>& compute) {
  std::vector<int> out;
  for (const auto& piece : split_outside_brackets(value, ',')) {
    const long n = leading_number(piece);
    if (n >= 0 && size_t(n) < compute.size()) out.push_back(compute[size_t(n)]);
  }
  return out;
}

}  // namespace

JobGpus job_gpus(const std::vector<Gpu>& gpus, const Environment& env) {
  const std::vector<int> compute = compute_gpus(gpus);
  JobGpus out;
  const char* slurm_variable = env.has("SLURM_STEP_GPUS") ? "SLURM_STEP_GPUS"
                               : env.has("SLURM_JOB_GPUS") ? "SLURM_JOB_GPUS"
                                                           : nullptr;
  const std::vector<int> slurm = slurm_variable ? slurm_gpus(env.get(slurm_variable), compute) : compute;
  if (!env.has("CUDA_VISIBLE_DEVICES")) {
    out.gpus = slurm;
    if (slurm_variable) out.source = fmt::format("{}={}", slurm_variable, env.get(slurm_variable));
    return out;
  }
  // What the ranks' CUDA sees, which the user may have narrowed within the job's share. Under
  // Slurm's device cgroup its ordinals count only the job's GPUs, in bus order: ordinals that
  // are not the job's GPUs' own numbers were renumbered so.
  const std::string cuda = env.get("CUDA_VISIBLE_DEVICES");
  std::vector<int> universe = compute;
  std::string within;
  if (slurm_variable && cuda.rfind("GPU-", 0) != 0) {
    bool renumbered = false;
    for (const auto& piece : split_outside_brackets(cuda, ',')) {
      const long n = leading_number(piece);
      renumbered |= n >= 0 && (size_t(n) >= compute.size() ||
                               std::find(slurm.begin(), slurm.end(), compute[size_t(n)]) == slurm.end());
    }
    if (renumbered) {
      universe = slurm;
      std::sort(universe.begin(), universe.end());
      within = fmt::format(" within {}={}", slurm_variable, env.get(slurm_variable));
    }
  }
  out.source = fmt::format("CUDA_VISIBLE_DEVICES={}{}", cuda, within);
  read_cuda_list(cuda, universe, gpus, out);
  return out;
}

std::string job_gpus_summary(const JobGpus& job, size_t all_gpus) {
  if (job.source.empty() && job.gpus.size() == all_gpus) return "";
  std::string line = fmt::format("the job's GPUs: {} of {}, ", job.gpus.size(), all_gpus);
  line += job.source.empty() ? "the NVIDIA ones (the ranks' CUDA and NCCL cannot use the others)"
                             : "from " + job.source;
  if (!job.unmatched.empty())
    line += fmt::format(" ('{}' names no GPU here: CUDA ignores it and what follows)", job.unmatched);
  return line + "; GPU numbers count those";
}

Topology restrict_to_job(const Topology& all, const JobGpus& job) {
  Topology out = all;
  out.gpus.clear();
  for (int i : job.gpus) {
    out.gpus.push_back(all.gpus[size_t(i)]);
    out.gpus.back().index = int(out.gpus.size()) - 1;
  }
  if (all.nvlinks) {
    std::vector<std::vector<int>> links(job.gpus.size(), std::vector<int>(job.gpus.size(), 0));
    for (size_t a = 0; a < job.gpus.size(); ++a)
      for (size_t b = 0; b < job.gpus.size(); ++b) links[a][b] = (*all.nvlinks)[size_t(job.gpus[a])][size_t(job.gpus[b])];
    out.nvlinks = links;
  }
  out.cpu_nvlinks.clear();
  for (const auto& c : all.cpu_nvlinks) {
    auto at = std::find(job.gpus.begin(), job.gpus.end(), c.gpu);
    if (at != job.gpus.end()) out.cpu_nvlinks.push_back({int(at - job.gpus.begin()), c.package, c.links});
  }
  return out;
}

}  // namespace muster
