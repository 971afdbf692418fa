// The MPI communicator: OpenMPI on the host. Compiled only when CMake finds MPI
// (LOOM_WITH_MPI); comm.h's MakeCommunicator is the way in, this header is for the NCCL
// communicator, which bootstraps over it, and for tests.
//
// Note [MPI thread level]
// loom asks for MPI_THREAD_SERIALIZED: collectives run on whichever replay worker thread holds
// the collective lane, so MPI is called from several threads, but never at once: every MPI call
// loom makes holds one process-wide lock (taken per call, not across a whole wait, so two
// communicators used from two threads cannot deadlock each other). MULTIPLE is not needed and
// costs a lock inside every OpenMPI call. A program that initialised MPI itself (mpi4py does, with
// MULTIPLE) is joined as it is; one initialised with less than SERIALIZED is refused with a
// CommError, since loom would break its promise. MPI is initialised once per process, on the
// first communicator, and finalised at exit only if loom initialised it.
#pragma once

#include <memory>
#include <string>

#include "core/communicator.h"

namespace loom {

class MpiCommunicator : public Communicator {
 public:
  // Initialises MPI when nobody has, then duplicates MPI_COMM_WORLD (collective: Note
  // [Communicators are made in the same order on every rank]), so loom's messages never match
  // the program's own. Waits at most timeout_s (Note [Bounded waits]).
  MpiCommunicator();
  ~MpiCommunicator() override;

  int rank() const override;
  int size() const override;
  const char* backend() const override { return "mpi"; }
  void AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void AllGather(const void* send, void* recv, int64_t count, DType dtype) override;
  void ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void Broadcast(void* data, int64_t count, DType dtype, int root) override;
  void Barrier() override;

  // This rank's index among the ranks on its own machine (collective: every rank calls it).
  int LocalRank();
  // Note [Bounded waits]: LOOM_COMM_TIMEOUT_S when the communicator was made, else 25 s.
  double timeout_s() const;
  void set_timeout_s(double seconds);  // ValueError unless > 0
  // Note [Ranks agree on each collective] (mpi.cc): on, every collective first checks that all
  // ranks issue the same one (LOOM_COMM_CHECK=1 turns it on for new communicators).
  void set_check(bool on);
  // Note [Waiting without taking a core]: how long a wait polls busily, in microseconds.
  int64_t spin_us() const;

  struct Impl;

 private:
  void Agree(int64_t kind, DType dtype, int64_t count, int64_t extra);
  std::unique_ptr<Impl> impl_;  // keeps <mpi.h> out of the headers that include this one
};

// Note [Waiting without taking a core]: microseconds of busy polling for a rank on a host that
// runs `ranks_on_host` ranks over `cores` cores (0 when they outnumber the cores, else 1000);
// `env` (LOOM_COMM_SPIN_US, may be null or empty) overrides it. ValueError for a value that is
// not a whole number of microseconds from 0 to 10^6.
int64_t WaitSpinMicros(const char* env, int ranks_on_host, int cores);

// Used by comm.cc's AbortAllRanks (Note [A failing rank takes the job down]).
bool MpiAbortAllRanks(const std::string& message, int code);
// A collective on some communicator of this process failed (the NCCL one says so through this): at exit
// the process aborts the job instead of finalising MPI (Note [Bounded waits]).
void MarkCollectiveFailed();

}  // namespace loom
