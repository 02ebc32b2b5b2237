// What a check found, as data: a kind that code can tell apart, the node it is about, and
// the words a user reads. Renderers pick by kind and node, never by matching the text.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace muster {

enum class FindingKind {
  // The network pass (ping, and doctor's ssh and network stages).
  Reach,       // a node could not be reached
  Identity,    // two entries are one machine
  Pair,        // one node cannot reach an address of another
  Rtt,         // a round-trip time above the threshold, or a node far off the others
  Bandwidth,   // a bandwidth below the threshold, or a node far off the others
  Clock,       // a clock off the head's beyond the threshold
  Facts,       // a node unlike most (GPUs, NICs, CPUs, memory, kernel, muster)
  Rendezvous,  // no MASTER_ADDR every node reached
  Interfaces,  // no one subnet joins every node
  // The smoke test.
  Hello,       // a rank never said hello, or said it twice
  Duplicate,   // two ranks on one GPU or slot of one machine
  Collective,  // a collective failed or was aborted
  DeadRank,    // a rank died during the test
  Wrong,       // wrong elements in a result
  Busbw,       // bus bandwidth below checks.min_busbw_gbps
};

// The name reports use for the kind ("reach", "pair", ..., "rank" for DeadRank).
const char* finding_name(FindingKind kind);

struct Finding {
  enum class Severity { Fail, Warn };
  FindingKind kind = FindingKind::Reach;
  Severity severity = Severity::Fail;
  std::optional<int> node;  // node rank it is about; unset: the cluster as a whole
  std::string message;      // one line, plain words, naming hosts, ranks and addresses
  // The link it is about, by its ends' node ranks, where it names a link rather than a node.
  std::optional<std::pair<int, int>> link;
};

}  // namespace muster
