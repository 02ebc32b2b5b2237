// Telling a starved measurement from a lost packet: the kernel's CPU pressure and softnet
// counters, read as the kernel writes them, and the verdict over one probe's wall time.
#include "probes/starvation.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace muster {
namespace {

using std::chrono::microseconds;

TEST(Starvation, ReadsTheSomeTotalOfCpuPressure) {
  EXPECT_EQ(parse_cpu_pressure_total("some avg10=16.66 avg60=24.33 avg300=23.08 total=9678064700\n"
                                     "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            9678064700u);
  EXPECT_EQ(parse_cpu_pressure_total("full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_pressure_total("some avg10=0.00 total=12x\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_pressure_total(""), std::nullopt);
}

TEST(Starvation, SumsTheDroppedColumnOfEveryCpu) {
  EXPECT_EQ(parse_softnet_dropped("071d3ed4 00000000 00000003 00000000\n"
                                  "06fbd3bc 0000001a 00000003 00000000\n"
                                  "06fbd3bc 00000002 00000003 00000000\n"),
            0x1cu);
  EXPECT_EQ(parse_softnet_dropped("071d3ed4\n"), std::nullopt);
  EXPECT_EQ(parse_softnet_dropped("071d3ed4 zz 00000003\n"), std::nullopt);
  EXPECT_EQ(parse_softnet_dropped(""), std::nullopt);
}

TEST(Starvation, ReadsBothFromAProcRootAndLacksWhatIsMissing) {
  const auto root = std::filesystem::temp_directory_path() / ("muster-starvation-" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "pressure");
  std::filesystem::create_directories(root / "net");
  std::ofstream(root / "pressure/cpu") << "some avg10=1.00 avg60=0.00 avg300=0.00 total=700\n";
  CpuShortage s = read_cpu_shortage(root.string());
  EXPECT_EQ(s.stalled_us, 700u);
  EXPECT_EQ(s.dropped, std::nullopt);  // a kernel without softnet_stat: nothing claimed
  std::ofstream(root / "net/softnet_stat") << "00000001 00000004 00000000\n";
  EXPECT_EQ(read_cpu_shortage(root.string()).dropped, 4u);
  // Past one read's page (200 CPUs), whole; past the bound, not believed.
  {
    std::ofstream many(root / "net/softnet_stat");
    for (int cpu = 0; cpu < 200; ++cpu) many << "00000001 00000004 00000000\n";
  }
  EXPECT_EQ(read_cpu_shortage(root.string()).dropped, 800u);
  std::ofstream(root / "pressure/cpu") << "some avg10=1.00 avg60=0.00 avg300=0.00 total=700\n"
                                       << std::string(1 << 20, ' ');
  EXPECT_EQ(read_cpu_shortage(root.string()).stalled_us, std::nullopt);
  std::filesystem::remove_all(root);
}

// Only waiting for a CPU excuses a probe; dropped packets are counted apart, as the node's
// own symptom (before, 3 drops alone made a timed-out probe "unknown").
TEST(Starvation, HalfTheTimeWaitingForACpuIsStarvedAndDroppedPacketsAreNoExcuse) {
  const CpuShortage before{1'000'000, 10};
  EXPECT_EQ(starvation_between(before, {1'400'000, 10}, microseconds(2'000'000)), "");  // 20%
  EXPECT_EQ(starvation_between(before, {2'420'000, 10}, microseconds(2'000'000)),
            "some task waited for a CPU 71% of the 2.0 s");
  EXPECT_EQ(starvation_between(before, {1'000'000, 13}, microseconds(2'000'000)), "");
  EXPECT_EQ(dropped_between(before, {1'000'000, 13}), 3u);
  EXPECT_EQ(starvation_between(before, {3'000'000, 11}, microseconds(2'000'000)),
            "some task waited for a CPU 100% of the 2.0 s");
  EXPECT_EQ(dropped_between({}, {1'000'000, 13}), 0u);
  // Without the counters (an old kernel, no PSI): never starved, the failure stands.
  EXPECT_EQ(starvation_between({}, {}, microseconds(2'000'000)), "");
}

TEST(Starvation, ReadsTheLastTenSecondsOfCpuPressureAsAFraction) {
  EXPECT_DOUBLE_EQ(*parse_cpu_pressure_avg10("some avg10=42.50 avg60=1.00 avg300=0.00 total=12345\n"
                                             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
                   0.425);
  EXPECT_DOUBLE_EQ(*parse_cpu_pressure_avg10("some avg10=100.00 avg60=0 total=1\n"), 1.0);
  EXPECT_EQ(parse_cpu_pressure_avg10("some avg10=1e9 total=1\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_pressure_avg10("some avg10=101.00 total=1\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_pressure_avg10("some avg10=-1.00 total=1\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_pressure_avg10("full avg10=5.00 total=1\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_pressure_avg10(""), std::nullopt);
}

// As this machine's kernel (6.18) writes it: a header, then one line per CPU.
constexpr const char* kArpCache =
    "entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast "
    "periodic_gc_runs forced_gc_runs unresolved_discards table_fulls\n"
    "00000000 000092aa 00009042 00000004   00056d0c 000160b5 000000ed   00000000         00000000         "
    "00001313         00002e78       00000000            00002c6f\n"
    "00000000 00008940 00008ba8 00000004   00055f0d 000163c5 000000c9   00000000         00000000         "
    "00000000         00002898       00000000            000026c5\n";

TEST(NeighbourTable, SumsTheTableFullsColumnOfEveryCpu) {
  EXPECT_EQ(parse_neighbour_table_fulls(kArpCache), 0x2c6fu + 0x26c5u);
  EXPECT_EQ(parse_neighbour_table_fulls("entries allocs\n00000000 00000001\n"), std::nullopt);  // no column
  EXPECT_EQ(parse_neighbour_table_fulls("entries table_fulls\n00000000\n"), std::nullopt);       // short line
  EXPECT_EQ(parse_neighbour_table_fulls("entries table_fulls\n00000000 zz\n"), std::nullopt);
  EXPECT_EQ(parse_neighbour_table_fulls(""), std::nullopt);
}

TEST(NeighbourTable, AProbeThatRanWhileTheTableWasFullSaysSoAndNamesTheLimit) {
  const auto root = std::filesystem::temp_directory_path() / ("muster-neigh-" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "net/stat");
  std::filesystem::create_directories(root / "sys/net/ipv4/neigh/default");
  std::ofstream(root / "net/stat/arp_cache") << kArpCache;
  std::ofstream(root / "sys/net/ipv4/neigh/default/gc_thresh3") << "1024\n";
  const NeighbourTable before = read_neighbour_table(root.string());
  EXPECT_EQ(before.times_full, 0x2c6fu + 0x26c5u);
  EXPECT_EQ(before.limit, 1024u);
  EXPECT_EQ(neighbour_table_between(before, before), "");
  NeighbourTable after = before;
  *after.times_full += 3;
  EXPECT_EQ(neighbour_table_between(before, after),
            "the kernel's neighbour table was full (gc_thresh3 is 1024): it cannot hold an entry for every "
            "peer; raise net.ipv4.neigh.default.gc_thresh3 (and gc_thresh2) above the number of peers");
  EXPECT_EQ(neighbour_table_between({}, after), "");  // no counter before: nothing claimed
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace muster
