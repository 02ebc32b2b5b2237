#include "launcher/cluster/environment.h"

#include <unistd.h>  // environ

namespace muster {

Environment Environment::current() {
  Environment env;
  for (char** p = environ; p && *p; ++p) {
    std::string entry(*p);
    auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.vars_.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::string Environment::get(const std::string& name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? std::string() : it->second;
}

std::vector<std::string> Environment::to_strings() const {
  std::vector<std::string> out;
  out.reserve(vars_.size());
  for (const auto& [name, value] : vars_) out.push_back(name + "=" + value);
  return out;
}

}  // namespace muster
