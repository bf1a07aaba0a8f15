// The hosts' side of a training step. Each host feeds the block of chips on its board: its input
// pipeline prepares the examples its cores read, and the infeed carries them over each chip's
// host link. Both run ahead of the TPUs (the next step's input is prepared and sent while this
// step computes), so in steady state a step takes the longest of the TPUs' step, the busiest
// chip's infeed and the busiest host's preparation of its examples. Between two device loops
// (TPUEstimator's iterations_per_loop steps) the host does its own work while the TPUs wait: a
// study may give that cost, which adds its share to every step.
#pragma once

#include <algorithm>
#include <vector>

#include "hardware/topology.hpp"  // host_of_chip
#include "schedules/study.hpp"

namespace tpusim {

/// What the hosts do for one step, at their busiest.
struct HostInput {
  double bytes_per_example = 0;  ///< the model's input for one example (what its first layer reads)
  int hosts = 0;                 ///< hosts feeding the slice
  int busiest_chip = 0;          ///< the chip receiving the most input bytes
  double chip_bytes = 0;         ///< what it receives per step
  int busiest_host = 0;          ///< the host preparing the most examples
  double host_examples = 0;      ///< examples it prepares per step (each once, however many cores read it)
  double infeed_s = 0;           ///< the busiest chip's bytes over its host link
  /// The busiest host's preparation of a step: the study's input_pipeline.seconds_per_step_per_host
  /// plus its examples at input_pipeline.examples_per_s_per_host; 0 when the study gives neither.
  double preparation_s = 0;
  /// The host's work between device loops, per step (the study's training_loop; 0 without).
  double loop_overhead_s = 0;
  /// The shortest step the hosts' input allows (it runs ahead of the TPUs).
  double bound_s() const { return std::max(infeed_s, preparation_s); }
};

/// The hosts' work per step for `input` (Schedule::input: what each core reads), with
/// `bytes_per_example` of input per example.
HostInput host_input(const Study& study, const std::vector<CoreInput>& input, double bytes_per_example);

/// The same for a study as its schedule feeds it.
HostInput host_input(const Study& study);

}  // namespace tpusim
