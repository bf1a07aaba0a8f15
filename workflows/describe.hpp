// What `tpusim describe` reports, as data: a hardware generation's figures with their sources
// and ranges, a slice's derived figures, the optimizers' update rules, and a study's model layer
// by layer (or one layer's hardware ops). The CLI prints them as tables (cli/describe.cpp); the
// Python module returns them. Bad input throws ConfigError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hardware/hardware_spec.hpp"
#include "hardware/json_fields.hpp"

namespace tpusim {
struct Study;
}

namespace tpusim::workflows {

/// A hardware generation's figures (the derived ones computed), and every sourced figure by the
/// dotted key an override names it with: its value, source and range.
Json hardware_json(const HardwareSpec& hw);
/// Every optimizer rule: slots, update cost, statistics and the cost's source.
Json optimizers_json();
/// The hardware (`hardware`, or the first shipped file that has it) naming slice `name`.
HardwareSpec hardware_with_slice(const std::string& name, const std::string& hardware);

/// A named slice's derived figures.
struct SliceFigures {
  HardwareSpec hw;
  std::string name;
  std::vector<int> shape;
  int chips = 0, cores = 0;
  double peak_flops_per_s = 0;
  int bisection_links = 0;
  double bisection_bytes_per_s = 0;   ///< one way
  int links = 0;                      ///< directed ICI links
  int diameter = 0;                   ///< hops
  std::vector<bool> wraps;            ///< per dimension
  std::vector<std::string> wrapping;  ///< the names of the dimensions that wrap around
  Json json() const;
};
/// `hardware` "": the first shipped hardware that has a slice of that name.
SliceFigures slice_figures(const std::string& name, const std::string& hardware);

/// One layer's hardware ops on one core for `batch` examples (forward, then backward: time,
/// bound) and its named ops' memory; ConfigError naming the layers when there is none so named.
Json layer_ops_json(const Study& study, std::int64_t batch, const std::string& layer_name);
/// The per-layer table of a study's model on one core, with its total.
Json model_table_json(const Study& study);

}  // namespace tpusim::workflows
