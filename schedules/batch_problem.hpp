// The problem a schedule reports when the study's batch does not split evenly: named by the
// batch the user wrote (the global one: over several slices, every slice's share together) and
// the multiple that batch must be.
#pragma once

#include <cstdint>
#include <string>

#include "hardware/json_fields.hpp"
#include "schedules/study.hpp"

namespace tpusim {

/// Adds "batch: found B, expected a multiple of U x slices (...)" when one slice's examples are
/// not a multiple of `unit`, which `what` names ("the 64 replicas (chips) on slice v4-128 ...").
/// Returns whether it added one.
bool check_batch_multiple(const Study& study, std::int64_t unit, const std::string& what, Problems& problems);

/// What a device of the study is, for messages: "chips" under megacore, else "TensorCores".
inline const char* devices_noun(const Study& study) { return study.megacore ? "chips" : "TensorCores"; }

}  // namespace tpusim
