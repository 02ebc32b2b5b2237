// The messages between the head and a node's agent, carried over the SSH channel's stdin
// and stdout: "KIND RANK LENGTH\n" then LENGTH bytes of payload. Lengths make any bytes
// safe (newlines, quotes, non-ASCII), and nothing is ever parsed by a shell.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "launcher/local/fence_exchange.h"

namespace muster {

// What a frame carries. A session carries any number of jobs (runs), one at a time; the
// rank field of Spec, Stop, Done and Fail frames carries the run's id, so nothing of an
// earlier run is ever taken for the current one.
enum class FrameKind {
  Hello,  // agent -> head: JSON facts about the node (hostname, version, GPUs)
  Spec,   // head -> agent: JSON launch spec for the node's ranks of one run
  Stop,   // head -> agent: tear that run's ranks down now (a second Stop: SIGKILL at once)
  Beat,   // both ways, every second: "still here". A side that hears nothing for the
          // heartbeat timeout takes the other for lost (a cut network sends no FIN)
  Bye,    // head -> agent: the session is over; exit
  Ask,    // head -> agent: JSON request ({"op": "probe" | "clock" | "ports", ...});
          // its rank field carries a request id
  Answer, // agent -> head: JSON answer, with the id of the Ask it answers
  Bound,  // agent -> head: JSON, where each of the node's ranks will run (before they start)
  Out,    // agent -> head: one stdout line of a rank
  Err,    // agent -> head: one stderr line of a rank
  Exit,   // agent -> head: JSON, a rank ended
  Done,   // agent -> head: JSON, every rank of the run ended and the node is clean (or not)
  Fail,   // agent -> head: text, the agent could not do what was asked
  Fence,  // agent -> head: every rank of the node entered an MPI fence; the node's part of it
          // (see FencePart), with the run's id
  Fenced, // head -> agent: every node's part of that fence, once all arrived
  Fetch,  // both ways, with the run's id: "REQUEST RANK", a rank's data that no fence carried
          // (PMIx's direct modex), asked of the node that holds it through the head
  Fetched,// both ways: "REQUEST STATUS\n" and the data, the answer to a Fetch
};


// Fetch and Fetched payloads. The decoders throw Error(Runtime) on a payload that is not one.
std::string encode_fetch(int request, int rank);
std::pair<int, int> decode_fetch(std::string_view payload);
std::string encode_fetched(int request, int status, std::string_view data);
std::tuple<int, int, std::string> decode_fetched(std::string_view payload);

// A Fence frame's payload: "PROTOCOL NUMBER\n" and the node's part. A Fenced frame's: the
// same line, then each node's part as "LENGTH\n" and its bytes, in node order.
struct FencePart {
  std::string protocol;  // "pmix", "pmi1"
  int number = 0;        // the protocol's fences in the run, from 0
  std::string bytes;
};
std::string encode_fence(const FencePart& part);

// Throws Error(Runtime) when the payload is not a fence part.
FencePart decode_fence(std::string_view payload);
std::string encode_fenced(const std::string& protocol, int number, const std::vector<std::string>& parts);
// Throws Error(Runtime) when the payload is not every node's parts of a fence.
std::pair<FencePart, std::vector<std::string>> decode_fenced(std::string_view payload);

struct Frame {
  FrameKind kind = FrameKind::Hello;
  int rank = -1;  // the rank an Out/Err/Exit frame is about; -1 otherwise
  std::string payload;
};

// One frame in wire form.
std::string encode_frame(const Frame& frame);

// What an agent sends of its node's part of a fence in run `run`: the Fence frame, or, for a
// part over kMaxFenceBytes (which the head would refuse), a Fail frame that says why.
Frame fence_frame(int run, FencePart part);

// The most a frame may carry, by who sends it; a longer one ends the channel before its
// bytes are kept. Each is the largest payload its sender makes, so that what one end may
// send the other takes:
// - an agent sends a rank's line (at most LineBuffer's 1 MiB), a report, an answer, and its
//   node's part of a fence or a Fetched answer: at most kMaxFenceBytes after a header line
//   of at most kMaxFenceHeader bytes ("pmix 12\n", "12 -46\n");
// - the head sends a spec, which holds the node's own ranks (up to kMaxRanks, about 70 bytes
//   each) and the job's command and environment, and a completed fence: every node's part
//   (kMaxFenceBytes together), each after its length line.
inline constexpr size_t kMaxFenceHeader = 64;
inline constexpr size_t kMaxAgentFramePayload = kMaxFenceBytes + kMaxFenceHeader;
inline constexpr size_t kMaxHeadFramePayload = size_t(256) << 20;
// What the head queues for one node at most, counting a frame shared by every node (a
// completed fence, held once) once for each: past it the node is taken as not reading.
inline constexpr size_t kMaxQueuedForNode = 2 * kMaxHeadFramePayload;
// A completed fence fits the head's frame for any job: each part's length line is at most
// 21 bytes, and a job has at most kMaxRanks nodes.
static_assert(kMaxHeadFramePayload >= kMaxFenceBytes + kMaxFenceHeader + size_t(21) * (size_t(1) << 20));

// Accumulates received bytes and returns whole frames. Throws Error(Runtime) on a header
// that is not a frame header (the other side is not a muster agent of this version) or a
// length over `max_payload`.
class FrameReader {
 public:
  explicit FrameReader(size_t max_payload) : max_payload_(max_payload) {}
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  std::optional<Frame> next();

 private:
  size_t max_payload_;
  std::string buffer_;
};

}  // namespace muster
