// Making sure a node can run `muster agent`: a muster of this version on its PATH or in
// ~/.cache/muster/VERSION/, or this very binary copied there over SFTP and checksummed.
#pragma once

#include <string>

#include "launcher/remote/ssh_transport.h"

namespace muster {

enum class Shipping { Allowed, Forbidden };

// The path of a muster of this version on the node, shipping this binary when allowed.
// Throws SshError naming the node when none can be had.
std::string ensure_muster_on_node(SshConnection& connection, const std::string& host,
                                  Shipping shipping);

}  // namespace muster
