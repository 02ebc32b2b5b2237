// SHA-256 and HMAC-SHA256 from OpenSSL's libcrypto: checksums of shipped files and the
// proofs that a client of a job's servers holds the job's secret.
#pragma once

#include <string>
#include <string_view>

namespace muster {

// Lower-case hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

// SHA-256 of a file's contents, read in pieces. Throws Error(Runtime) when it cannot be read.
std::string sha256_file(const std::string& path);

// The raw 32-byte HMAC-SHA256 of `message` under `key`.
std::string hmac_sha256(std::string_view key, std::string_view message);

// `size` bytes from the kernel's random source (getrandom). Throws Error(Runtime) on failure.
std::string random_bytes(size_t size);

// Lower-case hex of raw bytes.
std::string to_hex(std::string_view bytes);

}  // namespace muster
