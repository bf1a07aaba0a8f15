#include "hardware/hardware_spec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#ifndef TPUSIM_CONFIG_DIR
#define TPUSIM_CONFIG_DIR "configs"
#endif

namespace tpusim {
namespace fs = std::filesystem;

fs::path config_dir() {
  if (const char* env = std::getenv("TPUSIM_CONFIG_DIR"); env && *env) return fs::path(env);
  return fs::path(TPUSIM_CONFIG_DIR);
}

namespace {

/// A regular file's contents as last parsed, while its size and modification time are unchanged
/// (a study's range ends each load the same hardware file: parsed once).
constexpr std::uintmax_t kMaxCachedJsonBytes = std::uintmax_t(1) << 20;  // hardware files, not huge studies
struct ParsedFile {
  fs::file_time_type modified;
  std::uintmax_t size = 0;
  Json json;
};

std::optional<Json> parsed_before(const fs::path& file, std::map<std::string, ParsedFile>& cache,
                                  fs::file_time_type& modified, std::uintmax_t& size) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  modified = fs::last_write_time(file, ec);
  if (ec) return std::nullopt;
  size = fs::file_size(file, ec);
  if (ec) return std::nullopt;
  const auto it = cache.find(file.string());
  if (it == cache.end() || it->second.modified != modified || it->second.size != size) return std::nullopt;
  return it->second.json;
}

Json read_json_text(const fs::path& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw ConfigError(file.string(), "", "a directory", "a JSON file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file.string(), "", "no readable file", "an existing JSON file");
  // Read in pieces up to a cap: a device or pipe that never ends (/dev/zero, a FIFO) is refused
  // instead of filling the memory.
  std::string text;
  std::array<char, 1 << 16> piece;
  while (in.read(piece.data(), piece.size()) || in.gcount() > 0) {
    if (text.size() + std::size_t(in.gcount()) > kMaxJsonFileBytes)
      throw ConfigError(file.string(), "", "more than " + std::to_string(kMaxJsonFileBytes >> 20) + " MiB",
                        "a JSON file of at most " + std::to_string(kMaxJsonFileBytes >> 20) +
                            " MiB (a configuration, not a device or a stream that never ends)");
    text.append(piece.data(), std::size_t(in.gcount()));
  }
  try {
    return parse_json_strict(text, file.string());
  } catch (const Json::parse_error& e) {
    // e.what() carries "at line L, column C"; keep it, it is the useful part.
    std::string what = e.what();
    const auto at = what.find("at line");
    throw ConfigError(file.string(), "",
                      "malformed JSON (" + what.substr(at == std::string::npos ? 0 : at) + ")", "valid JSON");
  }
}

}  // namespace

Json read_json_file(const fs::path& file) {
  static std::mutex mutex;
  static std::map<std::string, ParsedFile> cache;
  fs::file_time_type modified{};
  std::uintmax_t size = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto json = parsed_before(file, cache, modified, size)) return std::move(*json);
  }
  Json json = read_json_text(file);
  if (size > 0 && size <= kMaxCachedJsonBytes) {
    const std::lock_guard<std::mutex> lock(mutex);
    cache[file.string()] = ParsedFile{modified, size, json};
  }
  return json;
}

const char* to_string(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::Int8:
      return "int8";
    case MatmulPrecision::Fp8:
      return "fp8";
    default:
      return "bf16";
  }
}

namespace {

/// Reader for the hardware file's figures: each is {"value": number, "source": "..."}.
class SourcedReader {
 public:
  SourcedReader(Fields& fields, HardwareSpec& hw) : fields_(fields), hw_(hw) {}

  double number(const std::string& key, double min, double max) {
    const Json* v = fields_.value(key);
    if (!v) return min;
    Fields inner(*v, fields_.path_of(key), fields_.problems());
    if (!inner.ok()) return min;
    const double d = inner.number("value", min, max);
    record(inner);
    inner.finish();
    return d;
  }
  int count(const std::string& key, int min, int max) {
    const Json* v = fields_.value(key);
    if (!v) return min;
    Fields inner(*v, fields_.path_of(key), fields_.problems());
    if (!inner.ok()) return min;
    const auto i = inner.integer("value", min, max);
    record(inner);
    inner.finish();
    return int(i);
  }
  /// {"value": [[reads, writes], ...], "source": ...}: the fused kernels of multi-pass vector work.
  std::vector<std::array<int, 2>> kernels(const std::string& key) {
    std::vector<std::array<int, 2>> out;
    const Json* v = fields_.value(key);
    if (!v) return out;
    Fields inner(*v, fields_.path_of(key), fields_.problems());
    if (!inner.ok()) return out;
    const std::string path = inner.path_of("value");
    const Json* list = inner.value("value");
    record(inner);
    inner.finish();
    if (!list) return out;
    const char* expected =
        "a non-empty list of [tensor reads, tensor writes] per fused kernel, integers in [0, 8]";
    if (!list->is_array() || list->empty() || list->size() > 16) {
      fields_.problems().add(path, *list, expected);
      return out;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Json& k = (*list)[i];
      const bool ok = k.is_array() && k.size() == 2 && k[0].is_number_integer() && k[1].is_number_integer() &&
                      k[0].get<std::int64_t>() >= 0 && k[0].get<std::int64_t>() <= 8 &&
                      k[1].get<std::int64_t>() >= 0 && k[1].get<std::int64_t>() <= 8 &&
                      k[0].get<std::int64_t>() + k[1].get<std::int64_t>() > 0;
      if (!ok)
        fields_.problems().add(index_path(path, i), k, expected);
      else
        out.push_back({k[0].get<int>(), k[1].get<int>()});
    }
    return out;
  }
  /// {"value": [n, ...], "source": ...}: integers in [min, max], as many as the list holds.
  std::vector<int> counts(const std::string& key, int min, int max) {
    std::vector<int> out;
    const Json* list = sourced_value(key);
    const std::string path = fields_.path_of(key) + ".value";
    if (!list) return out;
    const std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    if (!list->is_array() || list->empty() || list->size() > 16) {
      fields_.problems().add(path, *list,
                             "a non-empty list of integers in [" + std::to_string(min) + ", " +
                                 std::to_string(max) + "], one per torus dimension");
      return out;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Json& n = (*list)[i];
      if (!n.is_number_integer() || n.get<std::int64_t>() < min || n.get<std::int64_t>() > max)
        fields_.problems().add(index_path(path, i), n, expected);
      else
        out.push_back(int(n.get<std::int64_t>()));
    }
    return out;
  }
  /// {"value": ["name", ...], "source": ...}: a non-empty list of distinct strings.
  std::vector<std::string> names(const std::string& key, const std::string& expected) {
    std::vector<std::string> out;
    const Json* list = sourced_value(key);
    const std::string path = fields_.path_of(key) + ".value";
    if (!list) return out;
    if (!list->is_array() || list->empty() || list->size() > 16) {
      fields_.problems().add(path, *list, expected);
      return out;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Json& n = (*list)[i];
      if (!n.is_string() || std::count(out.begin(), out.end(), n.get<std::string>()) > 0)
        fields_.problems().add(index_path(path, i), n, expected + " (each once)");
      else
        out.push_back(n.get<std::string>());
    }
    return out;
  }
  bool has(const std::string& key) { return fields_.has(key); }
  bool flag(const std::string& key) {
    const Json* v = fields_.value(key);
    if (!v) return false;
    Fields inner(*v, fields_.path_of(key), fields_.problems());
    if (!inner.ok()) return false;
    const bool b = inner.boolean("value");
    record(inner);
    inner.finish();
    return b;
  }

 private:
  /// Records a figure's source and, when it gives one, its range ("range": [low, high] of the
  /// value's type, containing the value; "range_source" says where the range comes from).
  void record(Fields& inner) {
    hw_.sources[inner.path()] = inner.string("source");
    const Json* range = inner.optional("range");
    if (!range) return;
    const std::string path = inner.path_of("range");
    const std::string range_source = inner.string("range_source");
    const Json* value = inner.optional("value");
    if (!value) return;
    const bool numbers = value->is_number() && range->is_array() && range->size() == 2 &&
                         (*range)[0].is_number() && (*range)[1].is_number();
    const bool flags = value->is_boolean() && range->is_array() && range->size() == 2 &&
                       (*range)[0].is_boolean() && (*range)[1].is_boolean();
    // A list's range is two alternatives of it (e.g. the collective algorithms to try in turn).
    const bool lists = value->is_array() && range->is_array() && range->size() == 2 &&
                       (*range)[0].is_array() && (*range)[1].is_array();
    if (numbers) {
      const double lo = (*range)[0].get<double>(), hi = (*range)[1].get<double>(), v = value->get<double>();
      if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= v && v <= hi)) {
        inner.problems().add(path, *range,
                             "[low, high] with low <= the value (" + value->dump() + ") <= high");
        return;
      }
    } else if (!flags && !lists) {
      inner.problems().add(path, *range,
                           value->is_boolean()
                               ? "[false, true] (both values plausible) or [v, v] (a flag that does not vary)"
                               : "[low, high], numbers around the value (" + value->dump().substr(0, 60) +
                                     "), or two alternatives of a list");
      return;
    }
    hw_.ranges[inner.path()] = FigureRange{(*range)[0], (*range)[1], range_source};
  }
  /// The "value" of a sourced figure (its source recorded), or nothing after a problem.
  const Json* sourced_value(const std::string& key) {
    const Json* v = fields_.value(key);
    if (!v) return nullptr;
    Fields inner(*v, fields_.path_of(key), fields_.problems());
    if (!inner.ok()) return nullptr;
    const Json* value = inner.value("value");
    record(inner);
    inner.finish();
    return value;
  }

  Fields& fields_;
  HardwareSpec& hw_;
};

constexpr int kMaxChipsPerDim = 1024;
constexpr int kMaxDims = 6;
constexpr std::int64_t kMaxChips = 1 << 20;

/// Reads {"chips": [x, y, ...], "wraparound": [bool, ...]} (and optional extra keys the caller
/// allowed): at most kMaxDims dimensions, the wrap-around list as long as the chips list.
void read_shape(Fields& f, SliceSpec& s) {
  s.shape.clear();
  s.wraparound.clear();
  if (const Json* chips = f.value("chips")) {
    if (!chips->is_array() || chips->empty() || chips->size() > std::size_t(kMaxDims)) {
      f.problems().add(f.path_of("chips"), *chips,
                       "[chips along x, along y, ...]: one integer >= 1 per torus dimension (1 to " +
                           std::to_string(kMaxDims) + " dimensions)");
    } else {
      std::int64_t product = 1;
      for (std::size_t i = 0; i < chips->size(); ++i) {
        const Json& c = (*chips)[i];
        if (!c.is_number_integer() || c.get<std::int64_t>() < 1 || c.get<std::int64_t>() > kMaxChipsPerDim) {
          f.problems().add(index_path(f.path_of("chips"), i), c,
                           "an integer in [1, " + std::to_string(kMaxChipsPerDim) + "]");
          s.shape.push_back(1);
        } else {
          s.shape.push_back(int(c.get<std::int64_t>()));
          product *= s.shape.back();
        }
      }
      if (product > kMaxChips)
        f.problems().add(f.path_of("chips"), *chips,
                         "at most " + std::to_string(kMaxChips) + " chips in all (these make " +
                             std::to_string(product) + ")");
    }
  }
  if (const Json* wrap = f.value("wraparound")) {
    const std::size_t dims = s.shape.empty() ? 2 : s.shape.size();
    if (!wrap->is_array() || wrap->size() != dims) {
      f.problems().add(f.path_of("wraparound"), *wrap,
                       "a list of " + std::to_string(dims) +
                           " booleans, one per dimension of chips: whether it wraps around");
    } else {
      for (std::size_t i = 0; i < dims; ++i) {
        const Json& w = (*wrap)[i];
        if (!w.is_boolean()) {
          f.problems().add(index_path(f.path_of("wraparound"), i), w, "true or false");
          s.wraparound.push_back(false);
        } else {
          s.wraparound.push_back(w.get<bool>());
        }
      }
    }
  }
}

/// "[4, 4, 4]": a shape as its JSON text.
std::string shape_text(const std::vector<int>& shape) { return Json(shape).dump(); }

std::string strip_prefix_number(const std::string& name, bool& ok) {
  // "v3-32" -> "32"
  const auto dash = name.rfind('-');
  ok = dash != std::string::npos && dash + 1 < name.size() &&
       name.find_first_not_of("0123456789", dash + 1) == std::string::npos;
  return ok ? name.substr(dash + 1) : std::string();
}

/// The core's figures (`core` of the hardware file).
void read_core(const Json& core, HardwareSpec& hw, Problems& problems) {
  Fields f(core, "core", problems);
  SourcedReader r(f, hw);
  CoreSpec& c = hw.core;
  c.mxus = r.count("mxus_per_core", 1, 64);
  c.mxu_rows = r.count("mxu_rows", 1, 4096);
  c.mxu_cols = r.count("mxu_cols", 1, 4096);
  c.matmul_row_padding = r.count("matmul_row_padding", 1, 4096);
  c.clock_hz = r.number("clock_hz", 1e6, 1e11);
  c.vpu_sublanes = r.count("vpu_sublanes", 1, 4096);
  c.vpu_lanes = r.count("vpu_lanes", 1, 4096);
  c.vpu_alus_per_lane_sublane = r.count("vpu_alus_per_lane_sublane", 1, 64);
  c.vpu_ops_per_alu_per_cycle = r.number("vpu_ops_per_alu_per_cycle", 0.01, 64);
  c.hbm_bytes = r.number("hbm_bytes_per_core", 1e6, 1e15);
  c.hbm_reserved_bytes = r.number("hbm_reserved_bytes_per_core", 0, 1e15);
  if (problems.empty() && c.hbm_reserved_bytes >= c.hbm_bytes)
    problems.add("core.hbm_reserved_bytes_per_core.value", Json(c.hbm_reserved_bytes),
                 "less than core.hbm_bytes_per_core (" + Json(c.hbm_bytes).dump() + ")");
  c.hbm_bandwidth_bytes_per_s = r.number("hbm_bandwidth_bytes_per_s_per_core", 1e6, 1e14);
  c.hbm_sustained_fraction = r.number("hbm_sustained_bandwidth_fraction", 0.05, 1.0);
  c.vmem_bytes = r.number("vmem_bytes_per_core", 1e3, 1e12);
  c.matmul_tile_rows = r.count("matmul_tile_rows", 1, 1 << 20);
  c.matmul_tile_depth = r.count("matmul_tile_depth", 1, 1 << 20);
  c.matmul_tile_cols = r.count("matmul_tile_cols", 1, 1 << 20);
  c.matmul_grid_step_overhead_cycles = r.number("matmul_grid_step_overhead_cycles", 0.0, 1e7);
  c.op_overhead_s = r.number("op_overhead_s", 0.0, 1e-2);
  c.fuse_elementwise = r.flag("fuse_elementwise");
  c.pad_activations_to_lanes = r.flag("pad_activations_to_lanes");
  c.allreduce_combine_threshold_bytes = r.number("allreduce_combine_threshold_bytes", 1, 1e12);
  c.gradient_collectives_overlap_backward = r.flag("gradient_collectives_overlap_backward");
  c.compiler_remat_recomputes_layers = r.flag("compiler_remat_recomputes_layers");
  c.tensor_collectives_overlap_matmuls = r.flag("tensor_collectives_overlap_matmuls");
  c.collective_matmul_min_operand_bytes = r.number("collective_matmul_min_operand_bytes", 0, 1e15);
  if (r.has("flash_attention_kernel")) c.flash_attention_kernel = r.flag("flash_attention_kernel");
  auto multipass = [&](const std::string& name) {
    MultiPassKernels m;
    m.kernels = r.kernels(name + "_kernels");
    m.vpu_ops_per_element = r.number(name + "_vpu_ops_per_element", 0.0, 1000.0);
    return m;
  };
  c.random_number_vpu_ops = r.number("random_number_vpu_ops_per_element", 0.0, 1000.0);
  c.normalization_forward = multipass("normalization_forward");
  c.normalization_backward = multipass("normalization_backward");
  c.softmax_forward = multipass("softmax_forward");
  c.softmax_backward = multipass("softmax_backward");
  if (r.has("int8_peak_ratio_to_bf16")) c.int8_peak_ratio = r.number("int8_peak_ratio_to_bf16", 0.1, 16.0);
  if (r.has("fp8_peak_ratio_to_bf16")) c.fp8_peak_ratio = r.number("fp8_peak_ratio_to_bf16", 0.1, 16.0);
  if (c.int8_peak_ratio || c.fp8_peak_ratio || r.has("quantize_vpu_ops_per_element"))
    c.quantize_vpu_ops = r.number("quantize_vpu_ops_per_element", 0.0, 1000.0);
  f.finish();
}

/// The chip's figures (`chip`).
void read_chip(const Json& chip, HardwareSpec& hw, Problems& problems) {
  Fields f(chip, "chip", problems);
  SourcedReader r(f, hw);
  ChipSpec& c = hw.chip;
  c.cores = r.count("cores_per_chip", 1, 64);
  c.peak_bf16_flops_per_s = r.number("peak_bf16_flops_per_s_per_chip", 1e6, 1e18);
  c.ici_links = r.count("ici_links_per_chip", 0, 64);
  c.ici_bandwidth_bytes_per_s = r.number("ici_bandwidth_bytes_per_s_per_link_per_direction", 1e6, 1e13);
  c.ici_latency_s = r.number("ici_latency_s_per_hop", 0.0, 1e-2);
  c.onchip_bandwidth_bytes_per_s = r.number("onchip_core_to_core_bandwidth_bytes_per_s", 1e6, 1e14);
  c.onchip_latency_s = r.number("onchip_core_to_core_latency_s", 0.0, 1e-2);
  c.host_link_bandwidth_bytes_per_s = r.number("host_link_bandwidth_bytes_per_s_per_chip", 1e6, 1e13);
  c.host_board_chips = r.counts("host_board_chips", 1, kMaxChipsPerDim);
  if (r.has("host_memory_bytes_per_host"))
    c.host_memory_bytes_per_host = r.number("host_memory_bytes_per_host", 1e6, 1e15);
  c.megacore = r.flag("megacore");
  c.collective_algorithms =
      r.names("collective_algorithms", "a list of collective algorithm names (tpusim describe collectives)");
  c.latency_collective_max_bytes = r.number("latency_collective_max_bytes", 0.0, 1e12);
  c.tdp_w = r.number("tdp_w", 1, 1e5);
  f.finish();
}

/// The data-center network's figures (`dcn`): what joins several slices.
void read_dcn(const Json& dcn, HardwareSpec& hw, Problems& problems) {
  Fields f(dcn, "dcn", problems);
  SourcedReader r(f, hw);
  hw.dcn.present = true;
  hw.dcn.nic_bandwidth_bytes_per_s = r.number("nic_bandwidth_bytes_per_s_per_host_per_direction", 1e6, 1e13);
  hw.dcn.latency_s = r.number("latency_s", 1e-9, 1.0);
  hw.dcn.reductions_overlap_backward = r.flag("reductions_overlap_backward");
  f.finish();
}

/// The pod's shape (`pod`) and the named slices (`slices`).
void read_pod(const Json& pod, HardwareSpec& hw, Problems& problems) {
  Fields f(pod, "pod", problems);
  read_shape(f, hw.pod);
  hw.sources["pod"] = f.string("source");
  hw.pod.name = hw.name + "-pod";
  if (const Json* blocks = f.optional("optical_blocks")) {
    const bool ok =
        blocks->is_array() && blocks->size() == hw.pod.shape.size() &&
        std::all_of(blocks->begin(), blocks->end(), [](const Json& b) {
          return b.is_number_integer() && b.get<std::int64_t>() >= 1 && b.get<std::int64_t>() <= 1024;
        });
    if (!ok) {
      problems.add(f.path_of("optical_blocks"), *blocks,
                   "the shape of the blocks optical switches join: one integer in [1, 1024] per dimension of "
                   "pod.chips");
    } else {
      hw.pod_blocks = blocks->get<std::vector<int>>();
      for (std::size_t d = 0; d < hw.pod_blocks.size(); ++d)
        if (hw.pod.shape[d] % hw.pod_blocks[d] != 0)
          problems.add(f.path_of("optical_blocks"), *blocks,
                       "a block shape dividing pod.chips " + shape_text(hw.pod.shape));
    }
  }
  f.finish();
}

void read_slices(const Json& slices, HardwareSpec& hw, Problems& problems) {
  Fields f(slices, "slices", problems);
  if (f.ok()) {
    hw.sources["slices"] = f.string("source");
    for (auto it = slices.begin(); it != slices.end(); ++it) {
      if (it.key() == "source") continue;
      f.allow(it.key());
      Fields s(it.value(), f.path_of(it.key()), problems);
      SliceSpec slice;
      slice.name = it.key();
      read_shape(s, slice);
      s.finish();
      hw.slices[slice.name] = slice;
    }
  }
  f.finish();
}

/// Checks across figures, once every value is sound: the stated peak against the derived one,
/// the torus's links, and each slice against the pod and its name.
void check_consistency(const HardwareSpec& hw, Problems& problems) {
  const double derived_peak = hw.chip.cores * hw.core.peak_matmul_flops_per_s();
  if (std::fabs(derived_peak - hw.chip.peak_bf16_flops_per_s) > 0.01 * hw.chip.peak_bf16_flops_per_s) {
    std::ostringstream msg;
    msg << "a value within 1% of cores x mxus x rows x cols x 2 x clock = " << derived_peak;
    problems.add("chip.peak_bf16_flops_per_s_per_chip.value", Json(hw.chip.peak_bf16_flops_per_s), msg.str());
  }
  const int dims = hw.pod.dims();
  if (hw.chip.ici_links != 2 * dims) {
    problems.add("chip.ici_links_per_chip.value", Json(hw.chip.ici_links),
                 std::to_string(2 * dims) + ": two per dimension of the pod's " + std::to_string(dims) +
                     "-dimensional torus (pod.chips " + shape_text(hw.pod.shape) + ")");
  }
  if (int(hw.chip.host_board_chips.size()) != dims) {
    problems.add("chip.host_board_chips.value", Json(hw.chip.host_board_chips),
                 "the chips one host feeds along each of the pod's " + std::to_string(dims) +
                     " dimensions (pod.chips " + shape_text(hw.pod.shape) + ")");
  }
  for (const auto& [name, s] : hw.slices) {
    const std::string path = "slices." + name;
    if (const std::string problem = slice_shape_problem(hw, s.shape); !problem.empty()) {
      problems.add(path + ".chips", Json(s.shape), problem);
      continue;
    }
    bool numbered = false;
    const std::string cores = strip_prefix_number(name, numbered);
    if (numbered && std::stoll(cores) != std::int64_t(s.chips()) * hw.chip.cores) {
      problems.add(path + ".chips", Json(s.shape),
                   "a shape with " + cores + " cores, as the name says (" + std::to_string(hw.chip.cores) +
                       " cores per chip)");
    }
  }
}

}  // namespace

HardwareSpec parse_hardware(const Json& json, const std::string& context) {
  Problems problems(context);
  HardwareSpec hw;
  Fields top(json, "", problems);
  if (!top.ok()) problems.throw_if_any();
  top.string("schema", {"tpusim.hardware/1"});
  hw.name = top.string("name");
  if (const Json* d = top.optional("description")) {
    if (d->is_string())
      hw.description = d->get<std::string>();
    else
      problems.add("description", *d, "a string (free text describing the hardware)");
  }

  if (const Json* core = top.value("core")) read_core(*core, hw, problems);
  if (const Json* chip = top.value("chip")) read_chip(*chip, hw, problems);
  if (const Json* pod = top.value("pod")) read_pod(*pod, hw, problems);
  if (const Json* dcn = top.optional("dcn")) read_dcn(*dcn, hw, problems);
  if (const Json* slices = top.value("slices")) read_slices(*slices, hw, problems);
  top.finish();
  problems.throw_if_any();
  check_consistency(hw, problems);
  problems.throw_if_any();
  hw.file = context;
  return hw;
}

std::vector<std::string> shipped_hardware() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(config_dir() / "hardware", ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

HardwareSpec load_hardware(const std::string& name_or_path, const fs::path& base_dir) {
  const fs::path file = hardware_file(name_or_path, base_dir);
  return parse_hardware(read_json_file(file), file.string());
}

void apply_hardware_overrides(Json& json, const Json& overrides, const std::string& path,
                              Problems& problems) {
  if (!overrides.is_object()) {
    problems.add(path, overrides, "an object of figure paths (\"chip.tdp_w\") to new values");
    return;
  }
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    Json* node = &json;
    std::string rest = it.key(), walked;
    while (node && !rest.empty()) {
      const std::string part = rest.substr(0, rest.find('.'));
      rest = rest.find('.') == std::string::npos ? "" : rest.substr(rest.find('.') + 1);
      walked += (walked.empty() ? "" : ".") + part;
      node = node->is_object() && node->contains(part) && part != "source" ? &(*node)[part] : nullptr;
    }
    if (!node || it.key().empty()) {
      problems.add(join_path(path, it.key()), Json(it.key()),
                   "a figure of the base hardware (a dotted path such as chip.tdp_w or pod.chips)");
      continue;
    }
    if (node->is_object() && node->contains("value") && node->contains("source")) {
      (*node)["source"] = "override in the study (was " + (*node)["value"].dump() + ": " +
                          (*node)["source"].get<std::string>() + ")";
      (*node)["value"] = it.value();
      node->erase("range");  // a value the study chose is not an assumption any more
      node->erase("range_source");
    } else {
      *node = it.value();
    }
  }
}

fs::path hardware_file(const std::string& name_or_path, const fs::path& base_dir) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  fs::path file;
  std::error_code ec;  // a name the filesystem refuses (too long, ...) is a name that is not there
  if (is_path) {
    file = name_or_path;
    if (file.is_relative() && !base_dir.empty() && fs::exists(base_dir / file, ec)) file = base_dir / file;
  } else {
    file = config_dir() / "hardware" / (name_or_path + ".json");
    if (!fs::exists(file, ec)) {
      std::string known;
      for (const auto& n : shipped_hardware()) known += (known.empty() ? "" : ", ") + n;
      throw ConfigError("hardware", "", "\"" + name_or_path + "\"",
                        "a shipped hardware name (" + known + ") or a path to a hardware JSON file");
    }
  }
  return file;
}

SliceSpec parse_slice(const Json& value, const std::string& path, const HardwareSpec& hw,
                      Problems& problems) {
  SliceSpec s;
  const std::string example = hw.pod.dims() == 3
                                  ? "{\"chips\": [x, y, z], \"wraparound\": [bool, bool, bool]}"
                                  : "{\"chips\": [x, y], \"wraparound\": [bool, bool]}";
  if (value.is_string()) {
    auto it = hw.slices.find(value.get<std::string>());
    if (it == hw.slices.end()) {
      std::string known;
      for (const auto& [n, _] : hw.slices) known += (known.empty() ? "" : ", ") + n;
      problems.add(path, value, "a slice of " + hw.name + " (" + known + ") or " + example);
      return s;
    }
    return it->second;
  }
  Fields f(value, path, problems);
  if (!f.ok()) return s;
  read_shape(f, s);
  f.finish();
  s.name = "custom";
  if (s.shape.empty()) return s;
  if (const std::string problem = slice_shape_problem(hw, s.shape); !problem.empty()) {
    problems.add(f.path_of("chips"), Json(s.shape),
                 problem + (s.dims() != hw.pod.dims() ? " (e.g. " + example + ")" : ""));
    return s;
  }
  s.name.clear();
  for (int n : s.shape) s.name += (s.name.empty() ? "" : "x") + std::to_string(n);
  return s;
}

std::string slice_shape_problem(const HardwareSpec& hw, const std::vector<int>& shape) {
  const auto& pod = hw.pod.shape;
  if (shape.size() != pod.size())
    return std::to_string(pod.size()) + " dimensions, as the " + hw.name + " pod's chips " + shape_text(pod) +
           " (this shape has " + std::to_string(shape.size()) + ")";
  bool inside = true;
  for (std::size_t d = 0; d < shape.size(); ++d) inside = inside && shape[d] <= pod[d];
  if (hw.pod_blocks.empty())
    return inside ? "" : "at most the " + hw.name + " pod's " + shape_text(pod) + " chips";
  bool in_block = true, whole = true;
  std::int64_t blocks = 1, pod_blocks = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    in_block = in_block && shape[d] <= hw.pod_blocks[d];
    whole = whole && shape[d] % hw.pod_blocks[d] == 0;
    blocks *= shape[d] / hw.pod_blocks[d];
    pod_blocks *= pod[d] / hw.pod_blocks[d];
  }
  if (in_block || (whole && blocks <= pod_blocks)) return "";
  return "a box inside one " + shape_text(hw.pod_blocks) + " block of the " + hw.name +
         " pod, or whole blocks (each dimension a multiple of the block's), at most the pod's " +
         std::to_string(pod_blocks) + " blocks";
}

HardwareSpec device_view(const HardwareSpec& hw, bool megacore) {
  if (!megacore || hw.chip.cores == 1) return hw;
  HardwareSpec d = hw;
  const int n = hw.chip.cores;
  d.core.tensor_cores = hw.core.tensor_cores * n;
  d.core.hbm_bytes = hw.core.hbm_bytes * n;
  d.core.hbm_reserved_bytes = hw.core.hbm_reserved_bytes * n;
  d.core.hbm_bandwidth_bytes_per_s = hw.core.hbm_bandwidth_bytes_per_s * n;
  d.core.vmem_bytes = hw.core.vmem_bytes * n;
  d.chip.cores = 1;
  return d;
}

}  // namespace tpusim
