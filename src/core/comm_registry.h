// How an op record refers to a communicator: by an integer id (the attribute "comm"), looked up
// here when its kernel runs. Records stay plain data (docs/design.md invariant 1): a dump shows
// "comm=3", and a kernel of src/device reaches the communicator through the interface of
// core/communicator.h without knowing its implementation (src/io/comm).
//
// Note [The collective token]
// Every communicator has one token block per device: a one-element tensor that every collective
// op on that communicator reads and writes besides its buffers. The analysis then orders all
// collectives of a graph in a chain (RAW/WAW on the token), so every schedule issues them in
// capture order on every rank (Note [Collectives keep issue order] in communicator.h), while
// they stay free to overlap any op that does not touch their buffers. Kernels never read the
// token's value; only its accesses matter.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "core/communicator.h"

namespace loom {

// Registers `comm` and returns its id (ids are never reused in a process).
int RegisterCommunicator(std::shared_ptr<Communicator> comm);
// Drops the registry's handle (and the tokens); later kernels with this id throw CommError.
void UnregisterCommunicator(int id) noexcept;
// The communicator registered as `id`; throws CommError when there is none.
std::shared_ptr<Communicator> FindCommunicator(int id);
// Note [The collective token]: `id`'s token on `dev`, created (allocated, persistent) on first use.
Tensor CommunicatorToken(int id, const std::shared_ptr<Device>& dev);

// An id registered for as long as this object lives.
class CommunicatorId {
 public:
  explicit CommunicatorId(std::shared_ptr<Communicator> comm);
  ~CommunicatorId();
  CommunicatorId(const CommunicatorId&) = delete;
  CommunicatorId& operator=(const CommunicatorId&) = delete;
  int id() const { return id_; }
  Communicator& comm() const { return *comm_; }
  const std::shared_ptr<Communicator>& shared() const { return comm_; }

 private:
  std::shared_ptr<Communicator> comm_;
  int id_;
};

}  // namespace loom
