#include "core/ranks_agree.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace loom {

bool CommCheckFromEnv() {
  const char* check = std::getenv("LOOM_COMM_CHECK");
  return check && std::string(check) == "1";
}

void CheckRanksAgree(const char* backend, const std::vector<std::string>& calls) {
  std::string differ;
  for (size_t r = 1; r < calls.size(); ++r)
    if (calls[r] != calls[0]) differ += detail::Cat(differ.empty() ? "" : ", ", "rank ", r, " calls ", calls[r]);
  LOOM_CHECK(differ.empty(), CommError, "[", backend, "] the ranks disagree on a collective: rank 0 calls ", calls[0],
             ", ", differ,
             " (every rank must issue the same collectives in the same order; Note [Ranks agree on each collective])");
}

void AgreeOverHost(Communicator& host, const char* backend, const std::string& call) {
  LOOM_ASSERT(call.size() <= kMaxCallDescription, "[", backend, "] collective description over ",
              kMaxCallDescription, " bytes: ", call);
  char mine[kMaxCallDescription] = {};
  std::memcpy(mine, call.data(), call.size());
  std::vector<char> all(kMaxCallDescription * size_t(host.size()));
  host.AllGather(mine, all.data(), int64_t(kMaxCallDescription), DType::kUInt8);
  std::vector<std::string> calls;
  for (int r = 0; r < host.size(); ++r) {
    const char* p = all.data() + kMaxCallDescription * size_t(r);
    calls.emplace_back(p, strnlen(p, kMaxCallDescription));
  }
  CheckRanksAgree(backend, calls);
}

}  // namespace loom
