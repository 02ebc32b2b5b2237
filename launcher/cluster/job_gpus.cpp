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

// One word of the list: a number counts the compute GPUs; "GPU-..." is a UUID or its unique
// prefix. -1 when it names none.
int gpu_named(const std::string& word, const std::vector<int>& compute, const std::vector<Gpu>& gpus) {
  if (word.rfind("GPU-", 0) == 0) {
    int found = -1;
    for (int i : compute)
      if (gpus[size_t(i)].uuid && gpus[size_t(i)].uuid->rfind(word, 0) == 0) {
        if (found >= 0) return -1;  // a prefix of two UUIDs names neither
        found = i;
      }
    return found;
  }
  unsigned n = 0;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), n);
  if (error != std::errc() || end != word.data() + word.size() || n >= compute.size()) return -1;
  return compute[n];
}

}  // namespace

JobGpus job_gpus(const std::vector<Gpu>& gpus, const Environment& env) {
  const std::vector<int> compute = compute_gpus(gpus);
  JobGpus out;
  for (const char* variable : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"}) {
    if (!env.has(variable)) continue;
    const std::string value = env.get(variable);
    out.source = fmt::format("{}={}", variable, value);
    for (const auto& piece : split_outside_brackets(value, ',')) {
      const std::string word = without_blanks(piece);
      const int gpu = gpu_named(word, compute, gpus);
      if (gpu < 0 || std::find(out.gpus.begin(), out.gpus.end(), gpu) != out.gpus.end()) {
        if (!word.empty()) out.unmatched = word;
        break;
      }
      out.gpus.push_back(gpu);
    }
    return out;
  }
  out.gpus = compute;
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
