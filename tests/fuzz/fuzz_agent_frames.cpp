// libFuzzer: what crosses the SSH channel between head and agent: frames, and the JSON of
// launch specs, hellos, bindings, rank exits, node reports and health reports (and the health
// request an agent is asked) inside them, and MPI's fences and fetches (with PMI-1's puts),
// read in arbitrary pieces.
#include <cstdint>
#include <string_view>

#include "launcher/error.h"
#include "launcher/local/pmi1.h"
#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/health_report.h"
#include "launcher/remote/launch_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  muster::FrameReader reader(muster::kMaxAgentFramePayload);
  try {
    // Fed in pieces whose sizes come from the input itself.
    while (!bytes.empty()) {
      size_t piece = std::min<size_t>(bytes.size(), size_t(static_cast<unsigned char>(bytes[0])) + 1);
      reader.feed(bytes.substr(0, piece));
      bytes.remove_prefix(piece);
      while (auto frame = reader.next()) {
        try {
          switch (frame->kind) {
            case muster::FrameKind::Spec: muster::node_launch_spec_from_json(frame->payload); break;
            case muster::FrameKind::Hello: muster::node_hello_from_json(frame->payload); break;
            case muster::FrameKind::Bound: muster::node_bound_from_json(frame->payload); break;
            case muster::FrameKind::Exit: muster::exit_from_json(frame->payload); break;
            case muster::FrameKind::Done: muster::node_run_report_from_json(frame->payload); break;
            case muster::FrameKind::Ask: muster::expectations_from_request(frame->payload); break;
            case muster::FrameKind::Answer:
              // A health answer, or the counters read again; the head tries the one it asked for.
              try {
                muster::node_health_from_json(frame->payload);
              } catch (const muster::Error&) {
              }
              muster::counters_from_json(frame->payload);
              break;
            case muster::FrameKind::Fence: muster::decode_fence(frame->payload); break;
            case muster::FrameKind::Fenced: {
              // PMI-1's barrier reads every node's parts back as puts.
              auto fenced = muster::decode_fenced(frame->payload);
              if (fenced.first.protocol == "pmi1") muster::unpack_pmi1_puts(fenced.second);
              break;
            }
            case muster::FrameKind::Fetch: muster::decode_fetch(frame->payload); break;
            case muster::FrameKind::Fetched: muster::decode_fetched(frame->payload); break;
            default: break;
          }
        } catch (const muster::Error&) {
          // refused, as the session refuses it: any other exception is a finding
        }
      }
    }
  } catch (const muster::Error&) {
    // not muster's protocol: the link ends
  }
  return 0;
}
