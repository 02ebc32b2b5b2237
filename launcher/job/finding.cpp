#include "launcher/job/finding.h"

namespace muster {

const char* finding_name(FindingKind kind) {
  switch (kind) {
    case FindingKind::Reach: return "reach";
    case FindingKind::Identity: return "identity";
    case FindingKind::Pair: return "pair";
    case FindingKind::Rtt: return "rtt";
    case FindingKind::Bandwidth: return "bandwidth";
    case FindingKind::Clock: return "clock";
    case FindingKind::Facts: return "facts";
    case FindingKind::Rendezvous: return "rendezvous";
    case FindingKind::Interfaces: return "interfaces";
    case FindingKind::Hello: return "hello";
    case FindingKind::Duplicate: return "duplicate";
    case FindingKind::Collective: return "collective";
    case FindingKind::DeadRank: return "rank";
    case FindingKind::Wrong: return "wrong";
    case FindingKind::Busbw: return "busbw";
  }
  return "?";
}

}  // namespace muster
