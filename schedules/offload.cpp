#include "schedules/offload.hpp"

#include <algorithm>

#include "hardware/errors.hpp"
#include "hardware/topology.hpp"
#include "schedules/study.hpp"

namespace tpusim {

const std::vector<OffloadTarget>& offload_targets() {
  // One entry per target.
  static const std::vector<OffloadTarget> targets = {
      {"layer_input",
       "each layer's input, what re-materialization keeps (MaxText's decoder_layer_input: offload)", false,
       [](const mesh::LayerProgram&, double input) { return input; }},
      {"saved_outputs",
       "the outputs the save policy keeps (MaxText's qkv_proj_offloaded, minimal_offloaded: the policy's "
       "names offloaded)",
       true, [](const mesh::LayerProgram& p, double) { return p.saved_output_bytes; }},
  };
  return targets;
}

double Offload::bytes(const mesh::LayerProgram& p, double input) const {
  double sum = 0;
  for (const OffloadTarget* t : targets) sum += t->bytes(p, input);
  return sum;
}

Json Offload::json() const {
  Json names = Json::array();
  for (const OffloadTarget* t : targets) names.push_back(t->name);
  return names;
}

namespace {

std::string target_names() {
  std::string names;
  for (const auto& t : offload_targets())
    names += (names.empty() ? "\"" : ", \"") + t.name + "\" (" + t.description + ")";
  return names;
}

}  // namespace

Offload read_offload(Fields& f, Keep remat, const Study& study, Problems& problems) {
  Offload o;
  const Json* given = f.optional("offload");
  if (!given) return o;
  const std::string path = f.path_of("offload");
  if (!given->is_array()) {
    problems.add(path, *given, "a list of what to offload to host memory: " + target_names());
    return o;
  }
  for (std::size_t i = 0; i < given->size(); ++i) {
    const Json& name = (*given)[i];
    const auto& all = offload_targets();
    const auto it = std::find_if(all.begin(), all.end(), [&](const OffloadTarget& t) {
      return name.is_string() && t.name == name.get<std::string>();
    });
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (it == all.end() || std::count(o.targets.begin(), o.targets.end(), &*it) > 0) {
      problems.add(at, name, "one of " + target_names() + ", each once");
      continue;
    }
    if (remat == Keep::All || (it->needs_save_policy && remat != Keep::Saved))
      problems.add(at, name,
                   std::string(it->needs_save_policy ? "a save policy as the schedule's remat"
                                                     : "re-materialization (remat true or a save policy)") +
                       ": offload moves what it keeps of each layer to host memory");
    o.targets.push_back(&*it);
  }
  if (problems.empty() && !o.empty() && !(study.hardware.chip.host_memory_bytes_per_host > 0))
    problems.add(path, *given,
                 "no offload on " + study.hardware.name +
                     ": its file gives no chip.host_memory_bytes_per_host (" +
                     "the memory of the host that would hold what is offloaded)");
  return o;
}

void check_host_memory(const Study& study, double per_device, const std::string& path) {
  const ChipSpec& chip = study.hardware.chip;
  const int hosts = hosts_of_slice(study.slice, chip);
  const double devices = double((study.slice.chips() + hosts - 1) / hosts * chip.cores);
  const double need = per_device * devices, have = chip.host_memory_bytes_per_host;
  if (need <= have) return;
  throw ConfigError(study.file, path, std::to_string(std::int64_t(need)) + " bytes offloaded per host",
                    "at most the " + std::to_string(std::int64_t(have)) + " bytes of a host's memory (chip." +
                        "host_memory_bytes_per_host of " + study.hardware.name + ", for its " +
                        std::to_string(int(devices)) + " devices): offload less, or use more hosts");
}

}  // namespace tpusim
