// One probe rank of `muster smoke` (`muster smoke-rank`, started by muster on every slot):
// it says hello, meets the other ranks at the rendezvous rank 0 serves, agrees with them on
// a backend, and runs the collective sweep, reporting every step as a smoke line.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "launcher/cluster/environment.h"

namespace muster {

// Runs the probe rank described by `env` (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT, MUSTER_SMOKE and the interface variables). Every smoke line goes
// to `say`. On failure, a failure line is said and the Error is rethrown.
void run_smoke_rank(const Environment& env, const std::function<void(const std::string& line)>& say);

// How a probe rank exits after `failure`: kSmokeRankGaveUpExitCode when it failed because of a
// peer (a collective or the rendezvous timed out, or a peer's connection closed), which tells
// the launcher to let the other ranks report before it stops them; 3 for any other failure.
constexpr int kSmokeRankGaveUpExitCode = 4;
int smoke_rank_exit_code(const std::exception& failure);

}  // namespace muster
