#include "cli/describe.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <ostream>
#include <tuple>

#include "hardware/cost_model.hpp"
#include "reports/run_report.hpp"
#include "schedules/study.hpp"
#include "workflows/describe.hpp"

namespace tpusim::cli {
namespace {

/// printf's formatting into a string (the tables below keep their printf layouts).
__attribute__((format(printf, 1, 2))) std::string text(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string s(std::size_t(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(s.data(), s.size(), format, again);
  va_end(again);
  s.resize(std::size_t(std::max(n, 0)));
  return s;
}

void print_row(std::ostream& out, const char* label, const std::string& value,
               const std::string& source = {}) {
  out << text("  %-34s %-22s %s\n", label, value.c_str(), source.c_str());
}

/// A shape as "4x4x4" (or with another separator).
std::string shape_text(const std::vector<int>& shape, const std::string& separator = "x") {
  std::string text;
  for (int n : shape) text += (text.empty() ? "" : separator) + std::to_string(n);
  return text;
}

std::string num(double v, const char* unit = "") {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g%s", v, unit);
  return buf;
}

/// Where a figure comes from: its dotted key (what --hardware-override and a study's override
/// name) and its `source`, or nothing.
using SourceOf = std::function<std::string(const std::string&)>;

/// A core: MXUs, clock, peaks, HBM.
void print_core_figures(std::ostream& out, const HardwareSpec& hw, const SourceOf& src) {
  const double core_peak = hw.core.peak_matmul_flops_per_s();
  print_row(out, "cores per chip", std::to_string(hw.chip.cores), src("chip.cores_per_chip"));
  print_row(out, "MXUs per core",
            std::to_string(hw.core.mxus) + " x " + std::to_string(hw.core.mxu_rows) + "x" +
                std::to_string(hw.core.mxu_cols),
            src("core.mxus_per_core"));
  print_row(out, "clock", num(hw.core.clock_hz / 1e6, " MHz"), src("core.clock_hz"));
  print_row(out, "peak bf16 per core", num(core_peak / 1e12, " TFLOP/s"),
            "derived: MXUs x rows x cols x 2 x clock");
  print_row(out, "peak bf16 per chip", num(hw.chip.peak_bf16_flops_per_s / 1e12, " TFLOP/s"),
            src("chip.peak_bf16_flops_per_s_per_chip"));
  print_row(out, "vector unit per core", num(hw.core.vector_ops_per_s() / 1e12, " Tops/s"),
            "derived: sublanes x lanes x ALUs x ops x clock");
  print_row(out, "HBM per core", reports::human_bytes(hw.core.hbm_bytes), src("core.hbm_bytes_per_core"));
  print_row(out, "HBM reserved per core", reports::human_bytes(hw.core.hbm_reserved_bytes),
            src("core.hbm_reserved_bytes_per_core"));
  print_row(out, "HBM usable per core", reports::human_bytes(hw.core.usable_hbm_bytes()),
            "derived: capacity - reserved (what fits is checked against this)");
  print_row(out, "HBM bandwidth per core", num(hw.core.hbm_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("core.hbm_bandwidth_bytes_per_s_per_core"));
  print_row(out, "HBM sustained", num(100 * hw.core.hbm_sustained_fraction, " %"),
            src("core.hbm_sustained_bandwidth_fraction"));
  print_row(out, "roofline ridge", num(core_peak / hw.core.sustained_hbm_bytes_per_s(), " FLOP/byte"),
            "derived: peak / sustained HBM bandwidth");
}

/// The links: ICI, on-chip, to the host.
void print_link_figures(std::ostream& out, const HardwareSpec& hw, const SourceOf& src) {
  print_row(out, "ICI links per chip", std::to_string(hw.chip.ici_links), src("chip.ici_links_per_chip"));
  print_row(out, "ICI per link per direction", num(hw.chip.ici_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("chip.ici_bandwidth_bytes_per_s_per_link_per_direction"));
  print_row(out, "ICI latency per hop", num(hw.chip.ici_latency_s * 1e6, " us"),
            src("chip.ici_latency_s_per_hop"));
  print_row(
      out, "core to core on a chip",
      num(hw.chip.onchip_bandwidth_bytes_per_s / 1e9, " GB/s, ") + num(hw.chip.onchip_latency_s * 1e6, " us"),
      src("chip.onchip_core_to_core_bandwidth_bytes_per_s"));
  print_row(out, "host link per chip", num(hw.chip.host_link_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("chip.host_link_bandwidth_bytes_per_s_per_chip"));
  print_row(out, "chips per host", shape_text(hw.chip.host_board_chips), src("chip.host_board_chips"));
  print_row(out, "host memory",
            hw.chip.host_memory_bytes_per_host > 0 ? reports::human_bytes(hw.chip.host_memory_bytes_per_host)
                                                   : std::string("not given (no host offload)"),
            hw.chip.host_memory_bytes_per_host > 0 ? src("chip.host_memory_bytes_per_host") : std::string());
  print_row(out, "megacore", hw.chip.megacore ? "yes (study default)" : "no", src("chip.megacore"));
  std::string algorithms;
  for (const auto& a : hw.chip.collective_algorithms) algorithms += (algorithms.empty() ? "" : ", ") + a;
  print_row(out, "collective algorithms", algorithms, src("chip.collective_algorithms"));
  print_row(out, "latency-optimal up to", reports::human_bytes(hw.chip.latency_collective_max_bytes),
            src("chip.latency_collective_max_bytes"));
  if (!hw.dcn.present) {
    print_row(out, "data-center network", "not described (a study of this hardware spans one slice)", "");
    return;
  }
  print_row(out, "DCN per host per direction", num(hw.dcn.nic_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("dcn.nic_bandwidth_bytes_per_s_per_host_per_direction"));
  print_row(out, "DCN latency", num(hw.dcn.latency_s * 1e6, " us"), src("dcn.latency_s"));
}

/// How the software runs ops: padding, overheads, fusion, combining, multi-pass kernels.
void print_software_figures(std::ostream& out, const HardwareSpec& hw, const SourceOf& src) {
  print_row(out, "matmul row padding", std::to_string(hw.core.matmul_row_padding),
            src("core.matmul_row_padding"));
  print_row(out, "matmul tiles",
            std::to_string(hw.core.matmul_tile_rows) + " x " + std::to_string(hw.core.matmul_tile_depth) +
                " x " + std::to_string(hw.core.matmul_tile_cols),
            src("core.matmul_tile_rows"));
  const OpCost big = CostModel(hw.core).cost(dense_op("big", 8192, 8192, 8192, 2, 2));
  print_row(out, "matmul grid step",
            text("%g (%.1f %% at 8192^3)", hw.core.matmul_grid_step_overhead_cycles,
                 100 * big.hardware_flops / hw.core.peak_matmul_flops_per_s() / big.mxu_s),
            src("core.matmul_grid_step_overhead_cycles"));
  print_row(out, "per-op overhead", num(hw.core.op_overhead_s * 1e6, " us"), src("core.op_overhead_s"));
  print_row(out, "element-wise fusion", hw.core.fuse_elementwise ? "yes" : "no",
            src("core.fuse_elementwise"));
  if (hw.core.flash_attention_kernel)
    print_row(out, "flash attention kernel", *hw.core.flash_attention_kernel ? "yes" : "no (a what-if)",
              src("core.flash_attention_kernel"));
  print_row(out, "activation lane padding",
            hw.core.pad_activations_to_lanes ? "to " + std::to_string(hw.core.vpu_lanes) + " lanes" : "no",
            src("core.pad_activations_to_lanes"));
  print_row(out, "all-reduce combining", reports::human_bytes(hw.core.allreduce_combine_threshold_bytes),
            src("core.allreduce_combine_threshold_bytes"));
  print_row(out, "gradient reductions",
            hw.core.gradient_collectives_overlap_backward ? "during backward" : "after backward",
            src("core.gradient_collectives_overlap_backward"));
  print_row(
      out, "tensor-parallel reductions",
      hw.core.tensor_collectives_overlap_matmuls
          ? "behind their matmuls from " + reports::human_bytes(hw.core.collective_matmul_min_operand_bytes)
          : "after their matmuls",
      src("core.tensor_collectives_overlap_matmuls"));
  for (const auto& [label, key, pattern] :
       {std::tuple{"normalization forward", "normalization_forward", MultiPass::NormalizationForward},
        std::tuple{"normalization backward", "normalization_backward", MultiPass::NormalizationBackward},
        std::tuple{"softmax forward", "softmax_forward", MultiPass::SoftmaxForward},
        std::tuple{"softmax backward", "softmax_backward", MultiPass::SoftmaxBackward}}) {
    const MultiPassKernels& m = hw.core.multipass(pattern);
    print_row(out, label,
              std::to_string(m.kernels.size()) + " kernels, " + std::to_string(m.tensor_passes()) + " passes",
              src(std::string("core.") + key + "_kernels"));
    print_row(out, "", num(m.vpu_ops_per_element, " ops/element"),
              src(std::string("core.") + key + "_vpu_ops_per_element"));
  }
  print_row(out, "random number (dropout)", num(hw.core.random_number_vpu_ops, " ops/element"),
            src("core.random_number_vpu_ops_per_element"));
}

void print_ops(std::ostream& out, const Json& ops, const Json& memory) {
  out << text("%-9s %-28s %10s %10s %10s %10s %10s  %s\n", "pass", "op", "ms", "MXU ms", "VPU ms", "HBM ms",
              "GFLOP", "bound");
  double total = 0;
  for (const auto& o : ops) {
    total += o["seconds"].get<double>();
    out << text("%-9s %-28s %10.4f %10.4f %10.4f %10.4f %10.3f  %s\n", o["pass"].get<std::string>().c_str(),
                o["op"].get<std::string>().c_str(), o["seconds"].get<double>() * 1e3,
                o["mxu_s"].get<double>() * 1e3, o["vpu_s"].get<double>() * 1e3,
                o["hbm_s"].get<double>() * 1e3, o["model_flops"].get<double>() / 1e9,
                o["bound"].get<std::string>().c_str());
  }
  out << text("%-9s %-28s %10.4f\n\n", "total", "", total * 1e3);
  out << text("%-28s %12s %14s %14s\n", "named op", "kept MB", "fwd transient", "bwd in flight");
  double kept = 0;
  for (const auto& m : memory) {
    kept += m["kept_bytes"].get<double>();
    out << text("%-28s %12.2f %14.2f %14.2f\n", m["op"].get<std::string>().c_str(),
                m["kept_bytes"].get<double>() / 1e6, m["forward_transient_bytes"].get<double>() / 1e6,
                m["backward_in_flight_bytes"].get<double>() / 1e6);
  }
  out << text("%-28s %12.2f  (the layer holds the largest transient and the largest in flight)\n",
              "kept in all", kept / 1e6);
}

}  // namespace

int describe_hardware(std::ostream& out, const std::string& name, bool as_json) {
  const HardwareSpec hw = load_hardware(name);
  if (as_json) {
    out << workflows::hardware_json(hw).dump(2) << "\n";
    return 0;
  }
  out << text("%s (%s)\n%s\n\n", hw.name.c_str(), hw.file.c_str(), hw.description.c_str());
  const SourceOf src = [&](const std::string& path) {
    auto it = hw.sources.find(path);
    if (it == hw.sources.end()) return std::string();
    const auto r = hw.ranges.find(path);
    return path + "  " + it->second +
           (r == hw.ranges.end() ? std::string()
                                 : " [range " + r->second.low.dump() + " .. " + r->second.high.dump() + ": " +
                                       r->second.source + "]");
  };
  print_core_figures(out, hw, src);
  print_link_figures(out, hw, src);
  print_software_figures(out, hw, src);
  print_row(out, "pod", shape_text(hw.pod.shape) + " chips", src("pod"));
  std::string names;
  for (const auto& [n, s] : hw.slices) names += (names.empty() ? "" : " ") + n;
  print_row(out, "slices", names);
  return 0;
}

int describe_optimizers(std::ostream& out, bool as_json) {
  const Json j = workflows::optimizers_json();
  if (as_json) {
    out << j.dump(2) << "\n";
    return 0;
  }
  out << text("%-10s %6s %8s %8s  %s\n", "optimizer", "slots", "ops/par", "tensors", "source");
  for (const auto& r : j)
    out << text("%-10s %6d %8g %8g  %s\n", r["kind"].get<std::string>().c_str(),
                r["slots_per_param"].get<int>(), r["vpu_ops_per_param"].get<double>(),
                r["fp32_tensors_moved_per_param"].get<double>(), r["source"].get<std::string>().c_str());
  return 0;
}

int describe_slice(std::ostream& out, const std::string& name, const std::string& hardware, bool as_json) {
  const workflows::SliceFigures f = workflows::slice_figures(name, hardware);
  if (as_json) {
    out << f.json().dump(2) << "\n";
    return 0;
  }
  const HardwareSpec& hw = f.hw;
  std::string wrapping;
  for (const auto& d : f.wrapping) wrapping += (wrapping.empty() ? "" : " ") + d;
  out << text("%s on %s\n", name.c_str(), hw.name.c_str());
  print_row(out, "chips", shape_text(f.shape, " x ") + " = " + std::to_string(f.chips));
  print_row(out, "wrap-around", wrapping.empty() ? "none" : wrapping,
            hw.sources.count("slices") ? hw.sources.at("slices") : "");
  print_row(out, "cores", std::to_string(f.cores) + " TensorCores");
  if (hw.chip.megacore)
    print_row(out, "devices",
              std::to_string(f.chips) + " with megacore (a device is a chip), " + std::to_string(f.cores) +
                  " without (a device is a TensorCore)");
  print_row(out, "peak bf16", num(f.peak_flops_per_s / 1e15, " PFLOP/s"));
  print_row(out, "HBM total", reports::human_bytes(f.cores * hw.core.hbm_bytes));
  print_row(out, "ICI links (directed)", std::to_string(f.links));
  print_row(out, "diameter", std::to_string(f.diameter) + " hops");
  print_row(out, "bisection (one way)", num(f.bisection_bytes_per_s / 1e12, " TB/s"),
            std::to_string(f.bisection_links) + " links");
  return 0;
}

namespace {

/// One layer's hardware ops on one core (time, bound) and its named ops' memory.
int describe_ops(std::ostream& out, const Study& study, std::int64_t batch, const std::string& layer_name,
                 bool as_json) {
  const Json j = workflows::layer_ops_json(study, batch, layer_name);
  if (as_json) {
    out << j.dump(2) << "\n";
    return 0;
  }
  out << text("%s of %s on one %s core, %lld examples\n", j["layer"].get<std::string>().c_str(),
              study.model.name.c_str(), study.hardware.name.c_str(), (long long)batch);
  print_ops(out, j["ops"], j["named_op_memory"]);
  return 0;
}

/// A row of the model table.
void print_layer_row(std::ostream& out, const Json& r) {
  out << text("%-22s %12lld %10.3f %10.3f %10.2f %10.2f %10.2f %12.4f  %s\n",
              r["name"].get<std::string>().c_str(), (long long)r["params"].get<std::int64_t>(),
              r["forward_flops"].get<double>() / 1e9,
              (r["backward_input_flops"].get<double>() + r["backward_weight_flops"].get<double>()) / 1e9,
              r["output_bytes"].get<double>() / 1e6, r["stash_bytes"].get<double>() / 1e6,
              r["stash_remat_bytes"].get<double>() / 1e6,
              (r["forward_s"].get<double>() + r["backward_s"].get<double>()) * 1e3,
              r["bound"].get<std::string>().c_str());
}

}  // namespace

int describe_model(std::ostream& out, const std::string& file, const std::vector<std::string>& sets,
                   bool as_json, const std::string& ops_of) {
  const Study study = load_study(file, sets);
  if (!ops_of.empty()) return describe_ops(out, study, study.schedule->layer_batch(study), ops_of, as_json);
  const Json j = workflows::model_table_json(study);
  if (as_json) {
    out << j.dump(2) << "\n";
    return 0;
  }
  out << text("%s on one %s core, %lld examples per layer call\n", study.model.name.c_str(),
              study.hardware.name.c_str(), (long long)j["batch_per_core"].get<std::int64_t>());
  out << text("%-22s %12s %10s %10s %10s %10s %10s %12s  %s\n", "layer", "params", "fwd GFLOP", "bwd GFLOP",
              "out MB", "stash MB", "remat MB", "fwd+bwd ms", "bound");
  for (const auto& r : j["layers"]) print_layer_row(out, r);
  const Json& total = j["total"];
  print_layer_row(out, total);
  const double flops = total["forward_flops"].get<double>() + total["backward_input_flops"].get<double>() +
                       total["backward_weight_flops"].get<double>();
  out << text("MXU efficiency (model / padded FLOPs): %.1f %%\n",
              100.0 * flops / std::max(1.0, total["hardware_flops"].get<double>()));
  return 0;
}

}  // namespace tpusim::cli
