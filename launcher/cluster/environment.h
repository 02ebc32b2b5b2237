// A process environment as an ordered name -> value map.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace muster {

// Environment variables by name; ordered so that what is sent and shown is deterministic.
class Environment {
 public:
  Environment() = default;
  explicit Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
  Environment(std::initializer_list<std::pair<const std::string, std::string>> vars)
      : vars_(vars) {}

  // The environment muster itself was started with.
  static Environment current();

  void set(const std::string& name, const std::string& value) { vars_[name] = value; }
  void unset(const std::string& name) { vars_.erase(name); }
  bool has(const std::string& name) const { return vars_.count(name) > 0; }
  // The value, or "" when unset.
  std::string get(const std::string& name) const;
  const std::map<std::string, std::string>& vars() const { return vars_; }

  // "NAME=VALUE" strings, the form execve wants.
  std::vector<std::string> to_strings() const;

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace muster
