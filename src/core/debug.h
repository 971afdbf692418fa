// LOOM_DEBUG levels (docs/style.md, "Debuggability"): 1 prints each graph's plan, 2 adds per-op
// timing of replays, 3 adds every allocation. Read once from the environment.
#pragma once

namespace loom {
int DebugLevel();
void SetDebugLevel(int level);
}  // namespace loom
