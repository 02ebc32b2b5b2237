// Gloo (Debian's libgloo, TCP transport) as a Collective.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "probes/collective.h"
#include "probes/rendezvous_store.h"

namespace muster {

struct GlooSettings {
  std::string interface;                      // GLOO_SOCKET_IFNAME, exact; empty: by address
  std::string address;                        // else bind to this address
  std::chrono::milliseconds timeout{30000};   // per collective
};

// Joins ranks 0..size-1 through `store` (shared with the caller; it must outlive the result).
std::unique_ptr<Collective> make_gloo_collective(RendezvousClient& store, int rank, int size,
                                                 const GlooSettings& settings);

}  // namespace muster
