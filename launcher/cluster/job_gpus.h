// The GPUs a job may use on a node: those CUDA would give its ranks. A job that holds 4 of a
// node's 8 GPUs (Slurm's --gpus-per-node=4, or CUDA_VISIBLE_DEVICES set by hand) gets 4 slots,
// its ranks numbered within those 4, and each rank's binding, hello and device choice all
// refer to the same GPU. Another vendor's display adapter beside NVIDIA GPUs is no slot:
// the ranks' runtime (CUDA, NCCL) cannot use it.
#pragma once

#include <string>
#include <vector>

#include "launcher/cluster/environment.h"
#include "topology/topology.h"

namespace muster {

struct JobGpus {
  // Indices into Topology::gpus, in the order CUDA numbers them for the job (device 0 first).
  std::vector<int> gpus;
  // Where the choice came from, for plan and topo: "SLURM_STEP_GPUS=4,5,6,7",
  // "CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=0,1 within SLURM_STEP_GPUS=4,5", or ""
  // when the job has every compute GPU.
  std::string source;
  // A word the job's variable held that names no GPU here ("" when none): CUDA stops at it.
  std::string unmatched;
};

// The job's GPUs among `gpus` (a node's, in bus order) under `env`:
// - compute GPUs are the NVIDIA ones where there are any, else every GPU;
// - CUDA_VISIBLE_DEVICES, as the CUDA runtime reads it (ordinals or GPU-UUID prefixes; the
//   list ends at the first word that names no device, and a device named twice hides all);
//   where Slurm's device cgroup renumbered its ordinals from 0, they count the GPUs of
//   SLURM_STEP_GPUS (else SLURM_JOB_GPUS), Slurm's gres indices of the node's GPUs;
// - without it, Slurm's GPUs; with neither, every compute GPU.
JobGpus job_gpus(const std::vector<Gpu>& gpus, const Environment& env);

// One line for plan and topo when the job does not have every GPU of the machine ("the job's
// GPUs: 4 of 8, from SLURM_STEP_GPUS=4,5,6,7; GPU numbers count those"); "" when it does.
std::string job_gpus_summary(const JobGpus& job, size_t all_gpus);

// `all` with only the job's GPUs, renumbered in the job's order (index 0 is CUDA's device 0),
// and their NVLink counts.
Topology restrict_to_job(const Topology& all, const JobGpus& job);

}  // namespace muster
