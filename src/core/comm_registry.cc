// The communicator registry (comm_registry.h).
#include "core/comm_registry.h"

#include <map>
#include <mutex>

#include "core/device.h"

namespace loom {

namespace {
struct Entry {
  std::shared_ptr<Communicator> comm;
  std::map<Device*, Tensor> tokens;
};
std::mutex g_mu;
int g_next = 0;
std::map<int, Entry>& Registry() {
  static auto* r = new std::map<int, Entry>();  // outlives static destructors of other files
  return *r;
}
}  // namespace

int RegisterCommunicator(std::shared_ptr<Communicator> comm) {
  LOOM_CHECK(comm, ValueError, "[comm] RegisterCommunicator: no communicator");
  std::lock_guard<std::mutex> l(g_mu);
  const int id = g_next++;
  Registry()[id].comm = std::move(comm);
  return id;
}

void UnregisterCommunicator(int id) noexcept {
  Entry dead;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = Registry().find(id);
    if (it == Registry().end()) return;
    dead = std::move(it->second);
    Registry().erase(it);
  }
}

std::shared_ptr<Communicator> FindCommunicator(int id) {
  std::lock_guard<std::mutex> l(g_mu);
  auto it = Registry().find(id);
  LOOM_CHECK(it != Registry().end(), CommError, "[comm] no communicator with id ", id,
             " (released while a graph or op still refers to it?)");
  return it->second.comm;
}

Tensor CommunicatorToken(int id, const std::shared_ptr<Device>& dev) {
  std::lock_guard<std::mutex> l(g_mu);
  auto it = Registry().find(id);
  LOOM_CHECK(it != Registry().end(), CommError, "[comm] no communicator with id ", id);
  auto t = it->second.tokens.find(dev.get());
  if (t != it->second.tokens.end()) return t->second;
  Tensor token(Shape{1}, DType::kInt64, dev);
  token.block()->set_persistent(true);
  token.block()->Allocate();  // has memory: a graph sees it as state from outside (never written by value)
  return it->second.tokens.emplace(dev.get(), token).first->second;
}

CommunicatorId::CommunicatorId(std::shared_ptr<Communicator> comm)
    : comm_(std::move(comm)), id_(RegisterCommunicator(comm_)) {}
CommunicatorId::~CommunicatorId() { UnregisterCommunicator(id_); }

}  // namespace loom
