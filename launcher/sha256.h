// SHA-256, to check that a shipped muster binary arrived intact.
#pragma once

#include <string>
#include <string_view>

namespace muster {

// Lower-case hex SHA-256 of `data` (FIPS 180-4).
std::string sha256_hex(std::string_view data);

// SHA-256 of a file's contents. Throws Error(Runtime) when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace muster
