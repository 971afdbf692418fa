#include "nn/progress.h"

#include <unistd.h>

#include <algorithm>

namespace loom {
namespace nn {

ProgressBar::ProgressBar(int64_t total, std::FILE* out, bool enabled)
    : total_(std::max<int64_t>(total, 1)), out_(out), drawing_(enabled && out && ::isatty(fileno(out))) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Clear() {
  if (shown_) std::fputs("\r\033[K", out_);  // to the line's start, erase it
  shown_ = false;
}

void ProgressBar::Update(int64_t done, const std::string& fields) {
  if (!drawing_) return;
  auto now = std::chrono::steady_clock::now();
  if (shown_ && done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int kWidth = 24;
  const int filled = int(std::min<int64_t>(done, total_) * kWidth / total_);
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  Clear();
  std::fprintf(out_, "[%s] %lld/%lld  %s", bar.c_str(), (long long)done, (long long)total_, fields.c_str());
  std::fflush(out_);
  shown_ = true;
}

void ProgressBar::Print(const std::string& line) {
  if (!out_) return;
  Clear();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ProgressBar::Finish() {
  if (!shown_) return;
  std::fputs("\n", out_);
  std::fflush(out_);
  shown_ = false;
}

}  // namespace nn
}  // namespace loom
