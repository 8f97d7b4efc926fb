// The cluster's CURVE key material (DESIGN §7, PROTOCOLS §14): one key pair that every process of
// a job holds. Servers use its secret half as their server key and admit only clients that prove
// they hold it too, so a process without the key directory gets no service at all.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace tandem::wire {

struct CurveKeys {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
  friend bool operator==(const CurveKeys&, const CurveKeys&) = default;
};

inline constexpr const char* kCurveKeyFile = "cluster.key";

// A fresh key pair from libzmq (libsodium's randomness). kUnimplemented when libzmq was built
// without CURVE.
StatusOr<CurveKeys> GenerateCurveKeys();

// Writes DIR/cluster.key (mode 0600, DIR created 0700). kAlreadyExists when the file exists:
// replacing a cluster's keys is a decision, not a side effect.
Status WriteCurveKeys(const std::string& dir, const CurveKeys& keys);

// Reads DIR/cluster.key. kInvalidArgument naming the file when it is missing, malformed, its
// halves do not belong together, or it is readable by group or others.
StatusOr<CurveKeys> LoadCurveKeys(const std::string& dir);

// The keys a daemon's servers and clients use unless their options name others: set once at
// start-up from `security.keys`; nullopt = no authentication.
void SetDefaultCurveKeys(std::optional<CurveKeys> keys);
std::optional<CurveKeys> DefaultCurveKeys();

}  // namespace tandem::wire
