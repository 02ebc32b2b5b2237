#include "probes/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <net/if.h>
#include <netinet/in.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace muster {

std::vector<LocalAddress> local_addresses() {
  std::vector<LocalAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    int prefix = 0;
    if (a->ifa_netmask)
      prefix = __builtin_popcount(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
    out.push_back({a->ifa_name, text, prefix});
  }
  freeifaddrs(list);
  return out;
}

std::string subnet_of(const std::string& address, int prefix_length) {
  in_addr addr{};
  if (inet_pton(AF_INET, address.c_str(), &addr) != 1) return address;
  std::uint32_t host = ntohl(addr.s_addr);
  std::uint32_t mask = prefix_length <= 0 ? 0 : ~std::uint32_t(0) << (32 - prefix_length);
  addr.s_addr = htonl(host & mask);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, text, sizeof text);
  return fmt::format("{}/{}", text, prefix_length);
}

bool is_loopback(const std::string& address) {
  in_addr addr{};
  if (inet_pton(AF_INET, address.c_str(), &addr) != 1) return address == "::1" || address == "localhost";
  return (ntohl(addr.s_addr) >> 24) == 127;
}

std::optional<bool> name_resolves_within(const std::string& name, std::chrono::milliseconds limit) {
  struct Answer {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<bool> resolves;
  };
  auto answer = std::make_shared<Answer>();
  // getaddrinfo has no deadline of its own; the thread keeps the answer alive if it is late.
  std::thread([answer, name] {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    bool resolves = false;
    if (getaddrinfo(name.c_str(), nullptr, &hints, &found) == 0) {
      // Debian's /etc/hosts names the host 127.0.1.1: Gloo would bind there, and no peer
      // could reach it. Gloo takes the first address that binds, so the first one decides.
      if (const addrinfo* a = found) {
        char text[INET6_ADDRSTRLEN] = {};
        const void* where = a->ai_family == AF_INET
                                ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr)
                                : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            inet_ntop(a->ai_family, where, text, sizeof text) && !is_loopback(text))
          resolves = true;
      }
      freeaddrinfo(found);
    }
    std::lock_guard lock(answer->mutex);
    answer->resolves = resolves;
    answer->done.notify_all();
  }).detach();
  std::unique_lock lock(answer->mutex);
  answer->done.wait_for(lock, limit, [&] { return answer->resolves.has_value(); });
  return answer->resolves;
}

}  // namespace muster
