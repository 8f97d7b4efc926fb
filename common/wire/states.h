// The job's and members' states on the wire (schemas/chief.capnp) and in code (common/states.h).
// A capnp enum field reads back any 16-bit number a sender put there, so whatever arrives is
// checked here before the rest of the code sees it.
#pragma once

#include "common/states.h"
#include "common/status.h"
#include "schemas/chief.capnp.h"

namespace tandem::wire {

wire::JobState ToWire(tandem::JobState state);
wire::MemberState ToWire(tandem::MemberState state);
// kInvalidArgument for UNKNOWN (a sender that did not set the field) and numbers this build does
// not know.
StatusOr<tandem::JobState> FromWire(wire::JobState state);
StatusOr<tandem::MemberState> FromWire(wire::MemberState state);

}  // namespace tandem::wire
