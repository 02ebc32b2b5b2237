// NCCL as a Collective, with libnccl.so.2 and the CUDA runtime opened at run time: muster
// builds and starts on machines without either.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "probes/collective.h"
#include "probes/rendezvous_store.h"

namespace muster {

// Why NCCL cannot be used on this node (library missing, no CUDA device), or nullopt.
std::optional<std::string> nccl_unavailable_reason();

// Joins ranks 0..size-1 on CUDA device `device` through `store`. Throws Error(Runtime) with
// one clear line when NCCL or CUDA is missing or fails.
std::unique_ptr<Collective> make_nccl_collective(RendezvousClient& store, int rank, int size,
                                                 int device, std::chrono::milliseconds timeout);


}  // namespace muster
