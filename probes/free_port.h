// Finding network resources on this machine for a job's rendezvous.
#pragma once

namespace muster {

// A TCP port that is free on all local addresses right now, chosen by the kernel.
// Like torchrun's, it can be taken by someone else before the rank binds it.
int find_free_tcp_port();

}  // namespace muster
