#include "launcher/remote/slurm_call_back.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"
#include "probes/job_server.h"
#include "probes/socket_io.h"

namespace muster {

namespace {
using Clock = SocketClock;
using Milliseconds = std::chrono::milliseconds;
}  // namespace

HeadCallBack::HeadCallBack(const std::string& heads) : heads_(heads) {
  node_ = std::getenv("SLURMD_NODENAME") ? std::getenv("SLURMD_NODENAME") : "";
  if (node_.empty()) {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    node_ = name;
  }
  const char* secret = std::getenv(kAgentSecretVariable);
  if (!secret)
    throw Error(ErrorKind::Runtime, fmt::format("{}: muster agent --call-back: {} is not set; only "
                                                "muster's own srun step starts agents this way",
                                                node_, kAgentSecretVariable));
  secret_ = secret;
  unsetenv(kAgentSecretVariable);  // no rank inherits it
}

int HeadCallBack::connect(std::chrono::milliseconds limit) const {
  std::vector<std::string> tried;
  for (const auto& head : split_outside_brackets(heads_, ',')) {
    const auto colon = head.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (colon == std::string::npos || inet_pton(AF_INET, head.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
      tried.push_back(head + ": not ADDRESS:PORT");
      continue;
    }
    addr.sin_port = htons(uint16_t(std::atoi(head.c_str() + colon + 1)));
    const TcpConnection connection = connect_before(reinterpret_cast<sockaddr*>(&addr), sizeof addr,
                                                    Clock::now() + std::min(limit, Milliseconds(5000)));
    const int fd = connection.fd;
    if (fd < 0) {
      tried.push_back(head + ": " + std::strerror(connection.error));
      continue;
    }
    std::string why = prove_secret(fd, secret_, kAgentCallBackPurpose, limit);
    const std::string line = node_ + "\n";
    if (why.empty() && send(fd, line.data(), line.size(), MSG_NOSIGNAL) != ssize_t(line.size()))
      why = "the head went away";
    if (why.empty()) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    close(fd);
    tried.push_back(head + ": " + why);
  }
  throw Error(ErrorKind::Runtime, fmt::format("{}: cannot call back to muster's head ({})", node_,
                                              fmt::format("{}", fmt::join(tried, "; "))));
}

}  // namespace muster
