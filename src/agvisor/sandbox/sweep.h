// Removes sandboxes that were created but never started: what a client killed between create and
// start leaves behind (no agent runs in them, so no lifetime can end them). Used by
// Sandbox::Create once per Runtime object; `agvisor ls` shows such leftovers too.
#pragma once

#include <chrono>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {

// Removes instances labelled agvisor=1 in state "created" (the runtime's helpers too) whose
// creation is older than `min_age` (younger ones may belong to a client that is starting them
// right now). Returns how many were removed. `also_label` ("key=value", optional) narrows it to
// instances carrying that label too. Errors: those of listing; a failed removal is skipped.
Result<int> SweepNeverStarted(Runtime& runtime,
                              std::chrono::seconds min_age = std::chrono::seconds(120),
                              std::string_view also_label = "");

// As SweepNeverStarted, at most once per Runtime object (RuntimeLocal::swept); errors are
// ignored (best effort).
void SweepNeverStartedOnce(Runtime& runtime);

}  // namespace agvisor
