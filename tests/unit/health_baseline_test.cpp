// Counters that only grow (AER errors, Xids) judged against a baseline kept per node and per
// boot: a count fails until an operator accepts it, then only what is new counts, and a new
// boot starts again from its own counts. Fixture trees in the kernel's formats, a state
// directory of the test's own.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/health_findings.h"
#include "tests/support/node_tree.h"
#include "tests/support/state_dir.h"
#include "topology/health/counter_baseline.h"
#include "topology/health/health.h"

namespace muster {
namespace {

using testing::NodeTree;

const char* const kGpuDir = "sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/";
const char* const kXid79 = "4,900,1000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, GPU has fallen off the bus.";

using testing::StateDir;

NodeHealth check(const NodeTree& tree, const std::string& state_dir) {
  return check_node_health({tree.root(), nullptr, nullptr, "not asked", state_dir}, {});
}

using testing::of;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HealthBaseline, AnXidFailsUntilAcceptedThenOnlyNewOnesFailAndANewBootStartsAgain) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "boot-one");
  tree.kernel_log(kXid79);
  StateDir state;
  for (int run = 0; run < 2; ++run) {  // not taken as the baseline by the first run: it fails again
    auto xid = of(check(tree, state.path()), "xid");
    ASSERT_EQ(xid.size(), 1u) << run;
    EXPECT_EQ(xid[0].status, HealthStatus::Fail) << run;
    EXPECT_TRUE(has(xid[0].observed, "Xid 79 in the kernel log since boot")) << xid[0].observed;
  }
  const AcceptedCounters accepted = accept_counter_baseline(tree.root(), state.path());
  ASSERT_TRUE(accepted.saved) << accepted.why_not;
  EXPECT_EQ(accepted.boot_id, "boot-one");
  auto xid = of(check(tree, state.path()), "xid");
  ASSERT_EQ(xid.size(), 1u);
  EXPECT_EQ(xid[0].status, HealthStatus::Pass) << xid[0].observed;
  EXPECT_TRUE(has(xid[0].observed, "no new NVIDIA Xid")) << xid[0].observed;

  tree.kernel_log(std::string(kXid79) + "\n" + kXid79);
  xid = of(check(tree, state.path()), "xid");
  ASSERT_EQ(xid.size(), 1u);
  EXPECT_EQ(xid[0].status, HealthStatus::Fail);
  EXPECT_TRUE(has(xid[0].observed, "1 new Xid 79 (2 since boot)")) << xid[0].observed;
  EXPECT_TRUE(has(xid[0].observed, "UTC")) << xid[0].observed;

  tree.write("proc/sys/kernel/random/boot_id", "boot-two");
  xid = of(check(tree, state.path()), "xid");
  ASSERT_EQ(xid.size(), 1u);
  EXPECT_EQ(xid[0].status, HealthStatus::Fail);
  EXPECT_TRUE(has(xid[0].observed, "Xid 79 (2 times) in the kernel log since boot")) << xid[0].observed;
}

TEST(HealthBaseline, AnUncorrectableAerCountFailsUntilAcceptedThenItsGrowthFails) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "boot-one");
  tree.write(std::string(kGpuDir) + "aer_dev_nonfatal", "Undefined 0\nTOTAL_ERR_NONFATAL 3");
  StateDir state;
  for (int run = 0; run < 2; ++run) {
    auto aer = of(check(tree, state.path()), "pcie_aer");
    ASSERT_EQ(aer.size(), 1u) << run;
    EXPECT_EQ(aer[0].status, HealthStatus::Fail);
    EXPECT_TRUE(has(aer[0].observed, "3 uncorrectable (non-fatal) PCIe errors (AER) since boot")) << aer[0].observed;
  }
  ASSERT_TRUE(accept_counter_baseline(tree.root(), state.path()).saved);
  EXPECT_TRUE(of(check(tree, state.path()), "pcie_aer").empty());

  tree.write(std::string(kGpuDir) + "aer_dev_nonfatal", "Undefined 0\nTOTAL_ERR_NONFATAL 5");
  auto aer = of(check(tree, state.path()), "pcie_aer");
  ASSERT_EQ(aer.size(), 1u);
  EXPECT_EQ(aer[0].status, HealthStatus::Fail);
  EXPECT_TRUE(has(aer[0].observed, "2 new uncorrectable (non-fatal) PCIe errors (AER) since ")) << aer[0].observed;
  EXPECT_TRUE(has(aer[0].observed, "(5 since boot)")) << aer[0].observed;

  tree.write("proc/sys/kernel/random/boot_id", "boot-two");
  aer = of(check(tree, state.path()), "pcie_aer");
  ASSERT_EQ(aer.size(), 1u);
  EXPECT_TRUE(has(aer[0].observed, "5 uncorrectable (non-fatal) PCIe errors (AER) since boot")) << aer[0].observed;
}

// InfiniBand's error counters only grow, as AER counts do: what is counted since boot warns on
// the first run of a boot, which takes it as the baseline; later runs judge what is new, and a
// link that went down since then (link_downed grew) fails until accepted.
TEST(HealthBaseline, InfinibandErrorCountersAreJudgedByWhatIsNewSinceTheBaseline) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "boot-one");
  tree.ib_counter("mlx5_0", 1, "symbol_error", 12);
  tree.ib_counter("mlx5_0", 1, "link_downed", 1);  // the boot's own link training, or a reseat
  StateDir state;
  auto first = of(check(tree, state.path()), "ib_errors");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].status, HealthStatus::Warn);
  EXPECT_EQ(first[0].device, "mlx5_0 port 1 (0000:3b:00.0)");
  EXPECT_EQ(first[0].observed, "error counters since boot: symbol_error +12, link_downed +1");
  EXPECT_TRUE(of(check(tree, state.path()), "ib_errors").empty()) << "the first run's counts were not kept";

  tree.ib_counter("mlx5_0", 1, "symbol_error", 15);
  auto grown = of(check(tree, state.path()), "ib_errors");
  ASSERT_EQ(grown.size(), 1u);
  EXPECT_EQ(grown[0].status, HealthStatus::Warn);
  EXPECT_TRUE(has(grown[0].observed, "symbol_error +3")) << grown[0].observed;
  EXPECT_TRUE(has(grown[0].observed, "since 20")) << grown[0].observed;  // the baseline's date

  tree.ib_counter("mlx5_0", 1, "link_downed", 2);
  auto flapped = of(check(tree, state.path()), "ib_errors");
  ASSERT_EQ(flapped.size(), 1u);
  EXPECT_EQ(flapped[0].status, HealthStatus::Fail);
  EXPECT_TRUE(has(flapped[0].observed, "link_downed +1")) << flapped[0].observed;
  ASSERT_TRUE(accept_counter_baseline(tree.root(), state.path()).saved);
  EXPECT_TRUE(of(check(tree, state.path()), "ib_errors").empty());
}

TEST(HealthBaseline, AWarningCountIsTakenByTheFirstRunOfABootAndWarnsAgainOnlyWhenItGrows) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "boot-one");
  tree.write(std::string(kGpuDir) + "aer_dev_correctable", "RxErr 5\nTOTAL_ERR_COR 5");
  StateDir state;
  auto aer = of(check(tree, state.path()), "pcie_aer");
  ASSERT_EQ(aer.size(), 1u);
  EXPECT_EQ(aer[0].status, HealthStatus::Warn);
  EXPECT_TRUE(of(check(tree, state.path()), "pcie_aer").empty());
  tree.write(std::string(kGpuDir) + "aer_dev_correctable", "RxErr 7\nTOTAL_ERR_COR 7");
  aer = of(check(tree, state.path()), "pcie_aer");
  ASSERT_EQ(aer.size(), 1u);
  EXPECT_EQ(aer[0].status, HealthStatus::Warn);
  EXPECT_TRUE(has(aer[0].observed, "2 new correctable")) << aer[0].observed;
}

TEST(HealthBaseline, WithoutAStateDirectoryOrABootIdNothingIsKept) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.kernel_log(kXid79);
  StateDir state;
  EXPECT_EQ(of(check(tree, ""), "xid")[0].status, HealthStatus::Fail);
  EXPECT_EQ(of(check(tree, state.path()), "xid")[0].status, HealthStatus::Fail);  // no boot id in the tree
  EXPECT_FALSE(std::filesystem::exists(state.path()));
  const AcceptedCounters accepted = accept_counter_baseline(tree.root(), state.path());
  EXPECT_FALSE(accepted.saved);
  EXPECT_TRUE(has(accepted.why_not, "boot id")) << accepted.why_not;
}

TEST(HealthBaseline, AStateDirectoryThatIsASymlinkOrWritableByOthersIsRefusedAndSaysSo) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "boot-one");
  StateDir state, elsewhere;
  std::filesystem::create_directories(elsewhere.path());
  std::filesystem::create_symlink(elsewhere.path(), state.path());
  auto warned = of(check(tree, state.path()), "counter_baseline");
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_EQ(warned[0].status, HealthStatus::Warn);
  EXPECT_TRUE(has(warned[0].observed, "symlink")) << warned[0].observed;
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path()));
  EXPECT_FALSE(accept_counter_baseline(tree.root(), state.path()).saved);

  StateDir open;
  std::filesystem::create_directories(open.path());
  ::chmod(open.path().c_str(), 0777);
  warned = of(check(tree, open.path()), "counter_baseline");
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_TRUE(has(warned[0].observed, "writable by others")) << warned[0].observed;
}

TEST(HealthBaseline, AStateDirectoryIsMadePrivateAndItsFileIsWrittenWholeAndReadBounded) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "boot-one");
  StateDir state;
  ASSERT_TRUE(accept_counter_baseline(tree.root(), state.path()).saved);
  struct stat st{};
  ASSERT_EQ(::stat(state.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Named for the node's machine-id (NodeTree's), so that nodes sharing a home keep one each.
  const std::string file = state.path() + "/counters.5f0c2a9d7e3b4c1a8d6e9f2b3a4c5d6e.baseline";
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(state.path())) ++files;
  EXPECT_EQ(files, 1u);  // no temporary file left behind

  std::string why_not;
  auto loaded = load_counter_baseline(state.path(), tree.root(), why_not);
  ASSERT_TRUE(loaded) << why_not;
  EXPECT_EQ(loaded->boot_id, "boot-one");

  std::ofstream(file) << std::string(5 << 20, 'x');
  EXPECT_FALSE(load_counter_baseline(state.path(), tree.root(), why_not));
  EXPECT_TRUE(has(why_not, "larger than")) << why_not;
  std::ofstream(file) << "not a baseline\n";
  EXPECT_FALSE(load_counter_baseline(state.path(), tree.root(), why_not));
  EXPECT_TRUE(has(why_not, "not a muster counter baseline")) << why_not;
}

// Without root the state directory is in $HOME, which a cluster's nodes often share (NFS):
// each machine keeps a baseline of its own there, named for its machine-id, and one node's
// first run of a boot does not replace another's baseline (and what it accepted).
TEST(HealthBaseline, NodesSharingAStateDirectoryKeepABaselineEach) {
  NodeTree one, two;
  for (NodeTree* t : {&one, &two}) t->healthy_gpu_node();
  one.write("proc/sys/kernel/random/boot_id", "boot-one");
  one.write("etc/machine-id", "0123456789abcdef0123456789abcdef\n");
  two.write("proc/sys/kernel/random/boot_id", "boot-two");
  two.write("etc/machine-id", "fedcba9876543210fedcba9876543210\n");
  StateDir state;
  ASSERT_TRUE(accept_counter_baseline(one.root(), state.path()).saved);
  ASSERT_TRUE(accept_counter_baseline(two.root(), state.path()).saved);
  EXPECT_TRUE(std::filesystem::exists(state.path() + "/counters.0123456789abcdef0123456789abcdef.baseline"));
  EXPECT_TRUE(std::filesystem::exists(state.path() + "/counters.fedcba9876543210fedcba9876543210.baseline"));
  std::string why_not;
  auto first = load_counter_baseline(state.path(), one.root(), why_not);
  ASSERT_TRUE(first) << why_not;
  EXPECT_EQ(first->boot_id, "boot-one");
  auto second = load_counter_baseline(state.path(), two.root(), why_not);
  ASSERT_TRUE(second) << why_not;
  EXPECT_EQ(second->boot_id, "boot-two");

  // The one file every machine shared before is still read where a machine has none of its own.
  NodeTree three;
  three.healthy_gpu_node();
  three.write("proc/sys/kernel/random/boot_id", "boot-three");
  std::filesystem::remove(three.root() + "/etc/machine-id");
  ASSERT_TRUE(accept_counter_baseline(three.root(), state.path()).saved);  // no machine-id: the shared name
  EXPECT_TRUE(std::filesystem::exists(state.path() + "/counters.baseline"));
  three.write("etc/machine-id", "00000000000000000000000000000003\n");
  auto legacy = load_counter_baseline(state.path(), three.root(), why_not);
  ASSERT_TRUE(legacy) << why_not;
  EXPECT_EQ(legacy->boot_id, "boot-three");
}

TEST(HealthBaseline, TheStateDirectoryIsMustersOwnEnvironmentFirst) {
  const char* before = std::getenv("MUSTER_STATE_DIR");
  const std::string saved = before ? before : "";
  const char* xdg_before = std::getenv("XDG_STATE_HOME");
  const std::string xdg_saved = xdg_before ? xdg_before : "";
  ::setenv("MUSTER_STATE_DIR", "/tmp/elsewhere", 1);
  EXPECT_EQ(health_state_dir(), "/tmp/elsewhere");
  ::unsetenv("MUSTER_STATE_DIR");
  if (::geteuid() != 0) {
    ::setenv("XDG_STATE_HOME", "/tmp/xdg", 1);
    EXPECT_EQ(health_state_dir(), "/tmp/xdg/muster");
  }
  if (before) ::setenv("MUSTER_STATE_DIR", saved.c_str(), 1);
  if (xdg_before) ::setenv("XDG_STATE_HOME", xdg_saved.c_str(), 1);
  else ::unsetenv("XDG_STATE_HOME");
}

}  // namespace
}  // namespace muster
