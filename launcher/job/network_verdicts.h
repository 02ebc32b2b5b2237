// The verdicts of the network pass: what cluster_ping measured, judged and worded.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "launcher/job/cluster_ping.h"

namespace muster {

// What the measurements in `report` (nodes and pairs) allow: the rendezvous address and
// interfaces, and the problems found. The last step of ping_cluster, on its own for the
// scale benchmark.
void analyze_probes(const ClusterSpec& cluster, PingReport& report);

// Where MASTER_ADDR goes: the first node reached unless it failed a check (a capped link, a
// second entry of one machine), since every rank connects there first and a sick node there
// stalls or breaks the start of the whole job; then the first node that failed none, or the
// first, said, when every node failed one. ping_cluster places it; a caller that adds
// findings (the pair search's) places it again. `failed_elsewhere`: nodes that failed a check
// of another kind (doctor's health stage), avoided alike.
void place_rendezvous(const ClusterSpec& cluster, PingReport& report, const std::set<int>& failed_elsewhere = {});

// Each ordered pair's bandwidth: on the chosen interface's address where there is one (what
// the ranks will use), else the best of its addresses; the better of its measurements.
std::vector<PairBandwidth> pair_bandwidths(const PingReport& report);

// The slow nodes and links that `report`'s bandwidths show against the cluster's checks.
SlowBandwidth slow_bandwidth_of(const ClusterSpec& cluster, const PingReport& report);

// What the search found, in the words ping and doctor print.
std::vector<Finding> slow_pair_findings(const ClusterSpec& cluster, const PingReport& report,
                                        const CulpritReport& found);

// A probe that timed out while its prober was short of CPU stays unknown only where its
// target was short of CPU too; otherwise it is the failure it looks like, said with both.
void excuse_only_what_both_ends_explain(PingReport& report);

// MASTER_ADDR and the interfaces from the pairs measured, on the first node reached that is
// not in `avoid` (or the first reached).
void choose_rendezvous(const ClusterSpec& cluster, PingReport& report, const std::set<int>& avoid = {});

// Whether `p` measured the address its receiver will be reached on: the chosen interface's,
// or any where none was chosen. A link is judged on those alone.
bool on_chosen_interface(const PingReport& report, const PairProbe& p);

// The bar of the cluster file's checks (checks.min_bandwidth_ratio, 0.5 unless set).
BandwidthBar bandwidth_bar(const CheckThresholds& checks);

}  // namespace muster
