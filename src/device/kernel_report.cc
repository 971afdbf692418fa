#include "device/kernel_report.h"

#include <cstdio>
#include <mutex>
#include <set>

#include "core/debug.h"

namespace loom {

namespace {
std::mutex g_mu;
std::vector<std::pair<std::string, std::string>>& Reported() {
  static auto* v = new std::vector<std::pair<std::string, std::string>>;  // lives to process exit
  return *v;
}
std::vector<std::pair<std::string, double>>& Counters() {
  static auto* v = new std::vector<std::pair<std::string, double>>;
  return *v;
}
std::set<std::string>& Warned() {
  static auto* s = new std::set<std::string>;
  return *s;
}
}  // namespace

void ReportKernel(const std::string& kind, const std::string& impl) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    for (const auto& r : Reported())
      if (r.first == kind && r.second == impl) return;
    Reported().emplace_back(kind, impl);
  }
  if (DebugLevel() >= 1) std::fprintf(stderr, "[loom] kernel %s: %s\n", kind.c_str(), impl.c_str());
}

std::vector<std::pair<std::string, std::string>> ReportedKernels() {
  std::lock_guard<std::mutex> l(g_mu);
  return Reported();
}

void AddKernelCounter(const std::string& name, double value) {
  std::lock_guard<std::mutex> l(g_mu);
  for (auto& c : Counters())
    if (c.first == name) {
      c.second += value;
      return;
    }
  Counters().emplace_back(name, value);
}

std::vector<std::pair<std::string, double>> KernelCounters() {
  std::lock_guard<std::mutex> l(g_mu);
  return Counters();
}

void WarnOnce(const std::string& key, const std::string& message) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!Warned().insert(key).second) return;
  }
  std::fprintf(stderr, "[loom] warning: %s\n", message.c_str());
}

}  // namespace loom
