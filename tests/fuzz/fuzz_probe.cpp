// libFuzzer: the probe server's protocol after the handshake.
#include <cstdint>
#include <string>

#include "probes/tcp_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  muster::ProbeProtocol probe;
  muster::JobServer::Protocol::Replies replies;
  std::string in(reinterpret_cast<const char*>(data), size);
  if (!in.empty() && probe.serve(1, in, replies)) probe.end_of_input(1, replies);
  probe.closed(1);
  return 0;
}
