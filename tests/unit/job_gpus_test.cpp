// The GPUs a job holds, read as CUDA and Slurm give them: indices or UUID prefixes, the list
// ending where CUDA stops reading it, Slurm's gres indices before a renumbered
// CUDA_VISIBLE_DEVICES, and no slot on another vendor's display adapter.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/cluster/job_gpus.h"

namespace muster {
namespace {

Gpu gpu(int index, std::uint16_t vendor, const std::string& bus, const std::string& uuid = "") {
  Gpu g;
  g.index = index;
  g.vendor_id = vendor;
  g.vendor = vendor == 0x10de ? "NVIDIA" : "AMD";
  g.location.bus_id = bus;
  if (!uuid.empty()) g.uuid = uuid;
  return g;
}

// Eight NVIDIA GPUs, in bus order.
std::vector<Gpu> eight() {
  std::vector<Gpu> out;
  for (int i = 0; i < 8; ++i)
    out.push_back(gpu(i, 0x10de, fmt::format("0000:{:02x}:00.0", 0x10 + i), fmt::format("GPU-{}a5e-0000", i)));
  return out;
}

TEST(JobGpus, WithNothingSetTheJobHasEveryGpu) {
  auto job = job_gpus(eight(), Environment{});
  EXPECT_EQ(job.gpus, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(job.source, "");
  EXPECT_EQ(job_gpus_summary(job, 8), "");
}

TEST(JobGpus, CudaVisibleDevicesIsReadAsCudaReadsIt) {
  auto four = job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}});
  EXPECT_EQ(four.gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(job_gpus_summary(four, 8),
            "the job's GPUs: 4 of 8, from CUDA_VISIBLE_DEVICES=4,5,6,7; GPU numbers count those");
  // Its order is CUDA's numbering: device 0 is GPU 6.
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "6, 2"}}).gpus, (std::vector<int>{6, 2}));
  // A UUID, or a prefix that names one GPU only.
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "GPU-3a5e-0000,GPU-1"}}).gpus,
            (std::vector<int>{3, 1}));
  // CUDA stops at the first word that names no GPU, or names one twice.
  auto stopped = job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "1,9,2"}});
  EXPECT_EQ(stopped.gpus, std::vector<int>{1});
  EXPECT_EQ(stopped.unmatched, "9");
  EXPECT_NE(job_gpus_summary(stopped, 8).find("'9' names no GPU here"), std::string::npos);
  // Naming a device twice hides every device; numbers are read as strtoul reads them.
  EXPECT_TRUE(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "1,1,2"}}).gpus.empty());
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "1abc,+2"}}).gpus, (std::vector<int>{1, 2}));
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "3,-1,4"}}).gpus, std::vector<int>{3});
  // A list of UUIDs ends at the first word that is not one; a prefix of two names neither.
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "GPU-3a5e-0000,2"}}).gpus, std::vector<int>{3});
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "GPU-"}}).gpus, std::vector<int>{});
  auto mig = job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "MIG-7c1e-0000"}});
  EXPECT_TRUE(mig.gpus.empty());
  EXPECT_EQ(mig.unmatched, "MIG-7c1e-0000");
  // Set and empty: no GPU at all, as CUDA sees it.
  EXPECT_TRUE(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", ""}}).gpus.empty());
}

TEST(JobGpus, SlurmsGpusNameTheDevicesWhereCgroupsRenumberCudaVisibleDevices) {
  // With ConstrainDevices, Slurm counts CUDA_VISIBLE_DEVICES from 0 within the cgroup; its gres
  // indices name the GPUs of the node.
  const Environment env{{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"SLURM_JOB_GPUS", "0,1,2,3,4,5,6,7"},
                        {"SLURM_STEP_GPUS", "4,5,6,7"}};
  auto job = job_gpus(eight(), env);
  EXPECT_EQ(job.gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(job.source, "CUDA_VISIBLE_DEVICES=0,1,2,3 within SLURM_STEP_GPUS=4,5,6,7");
  auto batch = job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SLURM_JOB_GPUS", "2,3"}});
  EXPECT_EQ(batch.gpus, (std::vector<int>{2, 3}));
  // Without cgroups Slurm's numbers are CUDA's; a user who narrows them further is heeded.
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}, {"SLURM_STEP_GPUS", "4,5,6,7"}}).gpus,
            (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(job_gpus(eight(), Environment{{"CUDA_VISIBLE_DEVICES", "5"}, {"SLURM_STEP_GPUS", "4,5,6,7"}}).gpus,
            std::vector<int>{5});
  // Slurm's alone (a batch script before any step).
  auto slurm_only = job_gpus(eight(), Environment{{"SLURM_JOB_GPUS", "6,7"}});
  EXPECT_EQ(slurm_only.gpus, (std::vector<int>{6, 7}));
  EXPECT_EQ(slurm_only.source, "SLURM_JOB_GPUS=6,7");
}

TEST(JobGpus, AnotherVendorsDisplayAdapterIsNoSlotBesideNvidiaGpus) {
  // Three NVIDIA GPUs and an AMD display adapter between them on the bus.
  std::vector<Gpu> gpus = {gpu(0, 0x10de, "0000:17:00.0"), gpu(1, 0x1002, "0000:30:00.0"),
                           gpu(2, 0x10de, "0000:65:00.0"), gpu(3, 0x10de, "0000:b1:00.0")};
  auto all = job_gpus(gpus, Environment{});
  EXPECT_EQ(all.gpus, (std::vector<int>{0, 2, 3}));
  EXPECT_NE(job_gpus_summary(all, 4).find("3 of 4, the NVIDIA ones"), std::string::npos);
  // CUDA's device 1 is the second NVIDIA GPU, not the adapter.
  EXPECT_EQ(job_gpus(gpus, Environment{{"CUDA_VISIBLE_DEVICES", "1"}}).gpus, std::vector<int>{2});
  // Where no GPU is NVIDIA's, every GPU counts, as before.
  std::vector<Gpu> amd = {gpu(0, 0x1002, "0000:30:00.0"), gpu(1, 0x1002, "0000:31:00.0")};
  EXPECT_EQ(job_gpus(amd, Environment{}).gpus, (std::vector<int>{0, 1}));
}

TEST(JobGpus, TheRestrictedTopologyIsRenumberedWithItsNvlinks) {
  Topology all;
  all.gpus = eight();
  all.nvlinks = std::vector<std::vector<int>>(8, std::vector<int>(8, 0));
  (*all.nvlinks)[6][2] = (*all.nvlinks)[2][6] = 4;
  all.cpu_nvlinks = {{6, 1, 3}, {0, 0, 3}};
  JobGpus job;
  job.gpus = {6, 2};
  Topology t = restrict_to_job(all, job);
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.gpus[0].index, 0);
  EXPECT_EQ(t.gpus[0].location.bus_id, "0000:16:00.0");
  EXPECT_EQ(t.gpus[1].location.bus_id, "0000:12:00.0");
  EXPECT_EQ((*t.nvlinks)[0][1], 4);
  ASSERT_EQ(t.cpu_nvlinks.size(), 1u);
  EXPECT_EQ(t.cpu_nvlinks[0].gpu, 0);
}

}  // namespace
}  // namespace muster
