// The systemd notification protocol (sd_notify(3)), without libsystemd: a datagram to the unix
// socket named by $NOTIFY_SOCKET. Units of Type=notify wait for "READY=1"; with WatchdogSec
// they restart a daemon whose "WATCHDOG=1" pings stop (PROTOCOLS §12: daemons ping from their
// heartbeat thread). Without $NOTIFY_SOCKET (not under systemd) every call does nothing.
#pragma once

#include <string_view>

namespace tandem {

// Sends `state` (e.g. "READY=1", "WATCHDOG=1", "STOPPING=1") once. Returns whether it was sent;
// false without $NOTIFY_SOCKET or when the socket refused it. Thread-safe.
bool SdNotify(std::string_view state);

}  // namespace tandem
