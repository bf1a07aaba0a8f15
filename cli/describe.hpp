// `tpusim describe`'s tables (or, with `as_json`, the figures as JSON, workflows/describe.hpp):
// a hardware generation's figures with their sources, a slice's derived figures, the optimizers'
// update rules, and a study's model layer by layer (or one layer's hardware ops). Each writes to
// `out` and returns the exit code (0); bad input throws ConfigError.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tpusim::cli {

int describe_hardware(std::ostream& out, const std::string& name, bool as_json);
int describe_optimizers(std::ostream& out, bool as_json);
/// `hardware` "": the first shipped hardware that has a slice of that name.
int describe_slice(std::ostream& out, const std::string& name, const std::string& hardware, bool as_json);
/// The per-layer table of a study's model on one core; `ops_of` non-empty: that layer's ops instead.
int describe_model(std::ostream& out, const std::string& file, const std::vector<std::string>& sets,
                   bool as_json, const std::string& ops_of);

}  // namespace tpusim::cli
