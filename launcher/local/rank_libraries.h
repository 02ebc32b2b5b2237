// What the libraries a node's ranks loaded can say about where the job is, asked on the node
// where the ranks run, beside the stacks: NCCL's RAS service (NCCL 2.24 and later), which
// knows the NCCL ranks that stopped answering, and torch's flight recorder, which keeps each
// rank's last collectives. Both are optional: the stacks alone name the odd rank.
//
// Everything here is named by the rank's own environment, which its user chose, and muster
// may run as root: a file or pipe is used only when it is what it claims to be (a regular
// file, a FIFO, not a link) and belongs to the rank's user, and every read is bounded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace muster {

// NCCL's RAS client port and protocol (ras_internal.h's NCCL_RAS_CLIENT_PORT and
// NCCL_RAS_CLIENT_PROTOCOL): ncclras speaks protocol 2 to localhost:28028 by default.
inline constexpr int kNcclRasPort = 28028;
inline constexpr int kNcclRasProtocol = 2;

// Bounds on what is kept of the RAS service's answer and of the flight recorder's dumps.
inline constexpr size_t kMaxRasAnswerBytes = size_t(1) << 20;
inline constexpr size_t kMaxRasLines = 40;
inline constexpr size_t kMaxRasLineBytes = 200;
inline constexpr size_t kMaxFlightRecorderDump = size_t(4) << 20;        // one rank's
inline constexpr size_t kMaxFlightRecorderDumpsOfNode = size_t(32) << 20;  // a node's, together

// What NCCL's RAS service said, asked on one node: the lines of its report's Errors and
// Warnings sections (missing and dead processes, ranks whose collectives differ), or why it
// could not be asked.
struct RasSummary {
  std::string host;     // the node asked (the head fills it in for an agent's answer)
  std::string address;  // where the service was asked, "localhost:28028"
  std::vector<std::string> lines;
  std::string error;  // empty when it answered
};

// One rank's flight-recorder dump: its bytes, or why there are none. On the head, once
// written where the report says, `file` names it and `bytes` is emptied.
struct FlightRecorderDump {
  int rank = 0;
  std::string host;
  std::string source;  // the path on the node
  std::string bytes;
  std::string file;
  std::string note;  // why not collected, or what to know of it ("written before this reading")
};

// The RAS service the first of `ranks` that has NCCL loaded (/proc/PID/maps names a
// libnccl) would answer at: its NCCL_RAS_ADDR, else localhost:28028. None where no rank
// loaded NCCL or the rank's environment says NCCL_RAS_ENABLE=0.
std::optional<std::string> nccl_ras_address(const std::vector<pid_t>& ranks);

// Asks the RAS service at `address` ("host:port", "[v6]:port") for the job's status as
// ncclras does ("CLIENT PROTOCOL 2", "TIMEOUT s", "STATUS"), within `limit`.
RasSummary ask_nccl_ras(const std::string& address, std::chrono::milliseconds limit);

// The Errors and Warnings sections of a RAS status report, their empty lines and underlines
// dropped, at most kMaxRasLines lines of at most kMaxRasLineBytes bytes.
std::vector<std::string> ras_findings(const std::string& report);

// Asks the libraries of a node's running ranks (rank, pid) at once, then gathers their
// answers: made before the stacks are read, so that a flight recorder's dump, which its rank
// writes from a thread of its own within a second, is being written meanwhile.
class RankLibraries {
 public:
  RankLibraries(const std::vector<std::pair<int, pid_t>>& running, std::chrono::milliseconds limit);
  RankLibraries(const RankLibraries&) = delete;
  RankLibraries& operator=(const RankLibraries&) = delete;
  ~RankLibraries();

  // The RAS service's answer, if it was asked, and the dumps of every rank whose
  // environment asks for the flight recorder; waiting for them at most until the limit.
  std::optional<RasSummary> ras();
  std::vector<FlightRecorderDump> flight_recorder_dumps();

 private:
  struct Recorder {
    int rank;
    std::string dump_path;
    uid_t owner;
    bool asked;  // its pipe took our request: wait for a dump newer than it
  };
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::system_clock::time_point asked_at_;
  std::thread ras_asker_;  // joined before ras_answer_ is read
  std::optional<RasSummary> ras_answer_;
  std::vector<Recorder> recorders_;
};

// Where the head keeps a job's dumps: "muster-flight-recorder-JOBID" in its working
// directory, as an absolute path (so that `muster stacks`, run elsewhere, names it whole).
std::string flight_recorder_dir(const std::string& job_id);

// Writes the dumps' bytes into `dir` (made if missing, 0700; an existing one must be a
// directory of this user's, not a link), one file per rank under its name on the node
// ("nccl_trace_rank_5"), as torch's fr_trace expects them; sets each dump's `file`, or its
// note when it could not be written.
void keep_flight_recorder_dumps(std::vector<FlightRecorderDump>& dumps, const std::string& dir);

}  // namespace muster
