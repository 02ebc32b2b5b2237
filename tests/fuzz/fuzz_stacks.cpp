// libFuzzer: a node's stacks answer as the head receives it from an agent (its ranks' merged
// stacks, what NCCL's RAS service said, the flight recorder's dumps in base64), merged into a
// report, judged, and sent on to `muster stacks`, which reads it back: nothing an agent sends
// makes the head or the client fail other than with muster's Error.
#include <cstdint>
#include <string>

#include "launcher/error.h"
#include "launcher/job/stack_judge.h"
#include "launcher/local/stack_tree.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    muster::StackReport report;
    muster::merge_stacks(report.stacks, muster::merged_stacks_from_json(text), "node1");
    report.host_of_rank = {"node1", "node2"};
    (void)muster::judge_stacks(report);
    const muster::StackReport back = muster::stack_report_from_json(muster::to_json(report));
    (void)muster::judge_stacks(back);
  } catch (const muster::Error&) {
  }
  return 0;
}
