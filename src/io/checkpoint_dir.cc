#include "io/checkpoint_dir.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/file.h"

namespace loom {
namespace io {

namespace {

constexpr char kPrefix[] = "step-";
constexpr char kSuffix[] = ".ckpt";

// mkdir -p.
void MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    std::string part = dir.substr(0, i);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
      throw IOError(detail::Cat("[checkpoint_dir] cannot create '", part, "': ", std::strerror(errno)));
  }
  struct stat st;
  LOOM_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), IOError, "[checkpoint_dir] '", dir,
             "' is not a folder");
}

// The step of a file named step-<digits>.ckpt, or -1.
int64_t StepOf(const std::string& name) {
  const size_t p = sizeof(kPrefix) - 1, s = sizeof(kSuffix) - 1;
  if (name.size() <= p + s || name.compare(0, p, kPrefix) != 0 || name.compare(name.size() - s, s, kSuffix) != 0)
    return -1;
  std::string digits = name.substr(p, name.size() - p - s);
  if (digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// The step of a file named step-<digits>.rank-<digits>.ckpt, or -1.
int64_t RankFileStepOf(const std::string& name) {
  const size_t dot = name.find(".rank-");
  if (dot == std::string::npos) return -1;
  const std::string rank = name.substr(dot + 6);
  const size_t s = sizeof(kSuffix) - 1;
  if (rank.size() <= s || rank.compare(rank.size() - s, s, kSuffix) != 0) return -1;
  const std::string digits = rank.substr(0, rank.size() - s);
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return StepOf(name.substr(0, dot) + kSuffix);
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, int keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {
  LOOM_CHECK(!dir_.empty(), ValueError, "[checkpoint_dir] no folder given");
  LOOM_CHECK(keep_last_ >= 1, ValueError, "[checkpoint_dir] keep_last ", keep_last_, " must be at least 1");
  CheckNoNulByte(dir_, "checkpoint_dir", "the folder");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  MakeDirs(dir_);
}

std::string CheckpointDir::PathFor(int64_t step) const {
  LOOM_CHECK(step >= 0 && step < int64_t(1e12), ValueError, "[checkpoint_dir] step ", step, " is out of range");
  char name[40];
  std::snprintf(name, sizeof name, "%s%012lld%s", kPrefix, (long long)step, kSuffix);
  return dir_ + "/" + name;
}

std::string CheckpointDir::BestPath() const { return dir_ + "/best.ckpt"; }

std::string CheckpointDir::RankPathFor(int64_t step, int rank) const {
  LOOM_CHECK(rank >= 1 && rank < 1000000, ValueError, "[checkpoint_dir] rank ", rank, " is out of range [1, 1000000)");
  std::string path = PathFor(step);
  return path.substr(0, path.size() - (sizeof(kSuffix) - 1)) + ".rank-" + std::to_string(rank) + kSuffix;
}

std::string CheckpointDir::Save(int64_t step, const NamedTensors& tensors, const std::map<std::string, double>& meta) {
  std::string path = PathFor(step);
  SaveCheckpoint(path, tensors, meta);
  Prune();
  return path;
}

std::string CheckpointDir::SaveBest(const NamedTensors& tensors, const std::map<std::string, double>& meta) {
  SaveCheckpoint(BestPath(), tensors, meta);
  return BestPath();
}

std::vector<int64_t> CheckpointDir::Steps() const {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir_.c_str());
  LOOM_CHECK(d, IOError, "[checkpoint_dir] cannot list '", dir_, "': ", std::strerror(errno));
  while (dirent* e = ::readdir(d)) {
    int64_t s = StepOf(e->d_name);
    if (s >= 0) steps.push_back(s);
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

void CheckpointDir::Prune() const {
  auto remove = [](const std::string& path) {
    LOOM_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT, IOError, "[checkpoint_dir] cannot remove '", path,
               "': ", std::strerror(errno));
  };
  std::vector<int64_t> steps = Steps();
  for (size_t i = 0; i + size_t(keep_last_) < steps.size(); ++i) remove(PathFor(steps[i]));
  if (steps.empty()) return;
  const int64_t oldest_kept = steps[steps.size() > size_t(keep_last_) ? steps.size() - size_t(keep_last_) : 0];
  std::vector<std::string> stale;
  DIR* d = ::opendir(dir_.c_str());
  LOOM_CHECK(d, IOError, "[checkpoint_dir] cannot list '", dir_, "': ", std::strerror(errno));
  while (dirent* e = ::readdir(d)) {
    const int64_t s = RankFileStepOf(e->d_name);
    if (s >= 0 && s < oldest_kept) stale.push_back(dir_ + "/" + e->d_name);
  }
  ::closedir(d);
  for (const std::string& path : stale) remove(path);
}

std::string CheckpointDir::Latest() const {
  std::vector<int64_t> steps = Steps();
  return steps.empty() ? std::string() : PathFor(steps.back());
}

std::string CheckpointDir::Existing() const {
  const std::string latest = Latest();
  if (!latest.empty()) return latest;
  struct stat st;
  return ::stat(BestPath().c_str(), &st) == 0 ? BestPath() : std::string();
}

std::string CheckpointDir::LatestBefore(int64_t step) const {
  std::string best;
  for (int64_t s : Steps())
    if (s < step) best = PathFor(s);
  return best;
}

}  // namespace io
}  // namespace loom
