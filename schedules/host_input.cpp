#include "schedules/host_input.hpp"

#include <map>

namespace tpusim {

HostInput host_input(const Study& study, const std::vector<CoreInput>& input, double bytes_per_example) {
  const ChipSpec& chip = study.hardware.chip;
  HostInput h;
  h.bytes_per_example = bytes_per_example;
  std::vector<double> chip_bytes(std::size_t(study.slice.chips()), 0.0);
  // Per host: the examples of each shard its cores read (a shard is prepared once per host).
  std::map<int, std::map<int, double>> shards;
  for (std::size_t c = 0; c < input.size(); ++c) {
    const CoreInput& in = input[c];
    if (in.shard < 0 || in.examples <= 0) continue;
    const int index = int(c) / chip.cores;
    chip_bytes[std::size_t(index)] += in.examples * in.part * bytes_per_example;
    double& examples = shards[host_of_chip(study.slice, chip, index)][in.shard];
    examples = std::max(examples, in.examples);
  }
  h.hosts = hosts_of_slice(study.slice, chip);
  for (int i = 0; i < study.slice.chips(); ++i) {
    if (chip_bytes[std::size_t(i)] > h.chip_bytes) {
      h.chip_bytes = chip_bytes[std::size_t(i)];
      h.busiest_chip = i;
    }
  }
  for (const auto& [host, of_shard] : shards) {
    double examples = 0;
    for (const auto& [shard, n] : of_shard) examples += n;
    if (examples > h.host_examples) {
      h.host_examples = examples;
      h.busiest_host = host;
    }
  }
  h.infeed_s = h.chip_bytes / chip.host_link_bandwidth_bytes_per_s;
  if (study.host_preparation_given())
    h.preparation_s = study.host_seconds_per_step +
                      (study.host_examples_per_s > 0 ? h.host_examples / study.host_examples_per_s : 0.0);
  h.loop_overhead_s = study.host_seconds_per_loop / double(study.steps_per_loop);
  return h;
}

HostInput host_input(const Study& study) {
  // An example as the host sends it: its logical bytes (the host lays a batch out, e.g. batch
  // minor as MLPerf's input transposes do, so that it arrives unpadded).
  const double bytes = study.model.layers.front().lower(1, 0, study.model.weight_bytes).input_bytes;
  return host_input(study, study.schedule->input(study), bytes);
}

}  // namespace tpusim
