// What a planner brings to a purchase meeting: the days a study's training target takes at the
// simulated step, and what it costs at a price per chip-hour (study keys "target" and
// "price_per_chip_hour"). Every step of the run is the simulated one: no checkpoints, failures,
// restarts or evaluation (goodput 1) until a study says otherwise.
#pragma once

#include "hardware/json_fields.hpp"
#include "schedules/study.hpp"

namespace tpusim {

/// Adds "time_to_train" (a study with a target: its steps, days, and the days' interval when the
/// result has the step's) and "cost" (with a price as well: chip-hours and USD) to `result`, a
/// run's result.
void add_time_to_train(const Study& study, Json& result);

}  // namespace tpusim
