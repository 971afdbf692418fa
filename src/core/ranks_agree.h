// Ranks agree on each collective, for any communicator: each rank's description of the
// collective it is about to issue is gathered over a host communicator and compared, so that a
// mismatch is the same CommError on every rank instead of wrong values, a hang or a library's
// own message (Note [Ranks agree on each collective] in io/comm/mpi.cc, where MPI does it with
// its own encoded descriptions; the NCCL communicator gathers its call strings through this).
#pragma once

#include <string>
#include <vector>

#include "core/communicator.h"

namespace loom {

// The most bytes of one rank's description that AgreeOverHost gathers.
constexpr size_t kMaxCallDescription = 128;

// LOOM_COMM_CHECK=1 in the environment: the check is on for communicators made from now on.
bool CommCheckFromEnv();

// `calls`: every rank's description, in rank order. CommError "[<backend>] the ranks disagree on
// a collective: rank 0 calls A, rank 1 calls B ..." unless they are all the same.
void CheckRanksAgree(const char* backend, const std::vector<std::string>& calls);

// Gathers `call` from every rank of `host` (a communicator of host buffers, the same ranks) and
// checks them (CheckRanksAgree). `call` is at most kMaxCallDescription bytes.
void AgreeOverHost(Communicator& host, const char* backend, const std::string& call);

}  // namespace loom
