// What a planner brings to a purchase meeting: the days a study's training target takes at the
// simulated step, and what it costs at a price per chip-hour (study keys "target" and
// "price_per_chip_hour"), with and without goodput: what checkpoints, interruptions, restarts and
// evaluation cost a long run (Young's first-order model over the study's training_run figures).
#pragma once

#include "hardware/json_fields.hpp"
#include "schedules/study.hpp"

namespace tpusim {

/// Adds "time_to_train" (a study with a target: its steps, days, goodput and days with it, and
/// their intervals) and "cost" (with a price as well: chip-hours and USD, with and without
/// goodput) to `result`, a run's result.
void add_time_to_train(const Study& study, Json& result);

}  // namespace tpusim
