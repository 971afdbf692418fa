// ProgressBar: one terminal line redrawn in place,
//   "epoch 2  [#########...........]  1200/2500  14.2 ms/step  2253 items/s  loss 0.3121  lr 0.05"
// drawn only when the stream is a terminal: redirected to a file or a pipe it stays quiet, so
// logs hold the trainer's lines (Print) and no carriage returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace loom {
namespace nn {

class ProgressBar {
 public:
  // `enabled` false: never draws (Print still prints).
  explicit ProgressBar(int64_t total, std::FILE* out = stdout, bool enabled = true);
  ~ProgressBar();
  bool drawing() const { return drawing_; }
  // `done` of `total` finished; `fields` follows the bar. Redraws at most ten times a second
  // (and always at the end).
  void Update(int64_t done, const std::string& fields);
  // A whole line, printed above the bar (the bar is redrawn on the next Update).
  void Print(const std::string& line);
  void Finish();  // ends the bar's line

 private:
  void Clear();
  int64_t total_;
  std::FILE* out_;
  bool drawing_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace nn
}  // namespace loom
