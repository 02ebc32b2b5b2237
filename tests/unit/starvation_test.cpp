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
  std::filesystem::remove_all(root);
}

TEST(Starvation, HalfTheTimeWaitingForACpuOrADroppedPacketIsStarved) {
  const CpuShortage before{1'000'000, 10};
  EXPECT_EQ(starvation_between(before, {1'400'000, 10}, microseconds(2'000'000)), "");  // 20%
  EXPECT_EQ(starvation_between(before, {2'420'000, 10}, microseconds(2'000'000)),
            "some task waited for a CPU 71% of the 2.0 s");
  EXPECT_EQ(starvation_between(before, {1'000'000, 13}, microseconds(2'000'000)),
            "the kernel dropped 3 packets it had no time to process");
  EXPECT_EQ(starvation_between(before, {3'000'000, 11}, microseconds(2'000'000)),
            "some task waited for a CPU 100% of the 2.0 s; the kernel dropped 1 packet it had no time to process");
  // Without the counters (an old kernel, no PSI): never starved, the failure stands.
  EXPECT_EQ(starvation_between({}, {}, microseconds(2'000'000)), "");
}

}  // namespace
}  // namespace muster
