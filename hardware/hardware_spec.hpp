// What a TPU generation is, as read from configs/hardware/*.json: one TensorCore, one chip,
// the full pod and the named slices. Every figure carries its unit in its name; the JSON
// keeps each figure's `source` (doc / derived / reported / assumption), kept here too.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim {

/// How the compiler (XLA) runs vector work that must reduce over its whole tensor before it can
/// write any output (a normalization's statistics, a softmax's maximum and sum): as several
/// fused kernels, each a pass over the tensor in HBM.
struct MultiPassKernels {
  std::vector<std::array<int, 2>> kernels;  ///< per fused kernel: tensor reads, tensor writes
  double vpu_ops_per_element = 0;           ///< vector operations per element over all kernels
  /// Reads plus writes of the tensor over all kernels.
  int tensor_passes() const {
    int n = 0;
    for (const auto& k : kernels) n += k[0] + k[1];
    return n;
  }
};

/// The vector work of MultiPassKernels, by what it computes.
enum class MultiPass { NormalizationForward, NormalizationBackward, SoftmaxForward, SoftmaxBackward };

/// The number format a matmul's operands enter the MXU in (a study's precision.matmul): bf16, or
/// an 8-bit format (int8, fp8) at the generation's peak for it, the operands quantized first.
enum class MatmulPrecision : std::uint8_t { Bf16, Int8, Fp8 };
const char* to_string(MatmulPrecision p);

/// One device: a TensorCore with its own HBM (v2, v3, v4 without megacore), or under megacore a
/// whole chip (`tensor_cores` of them sharing the chip's HBM).
struct CoreSpec {
  int mxus = 0;                ///< matrix units per core
  int mxu_rows = 0;            ///< systolic array rows (contraction dimension tile)
  int mxu_cols = 0;            ///< systolic array columns (output dimension tile)
  int matmul_row_padding = 0;  ///< the streamed (batch-like) matmul dimension pads to this
  double clock_hz = 0;         ///< core clock
  int vpu_sublanes = 0;        ///< vector unit shape: sublanes x lanes of 32-bit ALUs
  int vpu_lanes = 0;
  int vpu_alus_per_lane_sublane = 1;     ///< 32-bit ALUs at each (sublane, lane) position
  double vpu_ops_per_alu_per_cycle = 0;  ///< element operations per ALU per cycle
  /// TensorCores this device runs on: 1, or the chip's under megacore (their MXUs and vector
  /// units work as one; the HBM figures below are then the whole chip's).
  int tensor_cores = 1;
  double hbm_bytes = 0;                  ///< HBM capacity per core
  double hbm_reserved_bytes = 0;         ///< of it, held by the runtime: programs cannot use it
  double hbm_bandwidth_bytes_per_s = 0;  ///< HBM bandwidth per core
  double hbm_sustained_fraction = 1;     ///< of it, what a streaming kernel sustains
  /// The bandwidth an op's HBM traffic moves at: the pin bandwidth times the sustained fraction.
  double sustained_hbm_bytes_per_s() const { return hbm_bandwidth_bytes_per_s * hbm_sustained_fraction; }
  double vmem_bytes = 0;  ///< on-chip vector memory per core
  /// A matmul runs as a grid of tiles, rows x depth x cols at most (the streamed, contraction and
  /// output dimensions), each grid step paying a fixed number of cycles (DMA issue, semaphores,
  /// loop bookkeeping) besides its MXU work.
  int matmul_tile_rows = 0, matmul_tile_depth = 0, matmul_tile_cols = 0;
  double matmul_grid_step_overhead_cycles = 0;
  double op_overhead_s = 0;      ///< fixed cost added to every op (launch, pipeline fill)
  bool fuse_elementwise = true;  ///< elementwise ops fuse into their producer: no own HBM pass
  /// An activation's minor dimension fills whole rows of `vpu_lanes` in HBM (its layout's tiles).
  bool pad_activations_to_lanes = true;
  /// The lanes an activation's minor dimension pads to (0: not padded).
  int activation_tile_lanes() const { return pad_activations_to_lanes ? vpu_lanes : 0; }
  /// The compiler combines gradient all-reduces into buffers of about this size (the default
  /// gradient bucket of data parallelism).
  double allreduce_combine_threshold_bytes = 0;
  /// Weight-gradient reductions start as soon as their gradients are computed, behind the rest of
  /// the backward (true), or only once the whole backward has finished (false: the compiler
  /// combines them into all-reduces scheduled at its end).
  bool gradient_collectives_overlap_backward = true;
  /// The compiler's own re-materialization (a step over HBM rewritten until it fits) recomputes
  /// whole layers from their inputs (true: it reaches every policy up to full), or only the
  /// element-wise and normalization outputs from the live matmul outputs beside them (false: its
  /// reach is "save_dots").
  bool compiler_remat_recomputes_layers = true;
  /// A tensor-parallel collective reducing a matmul's output (its partial sums, or an input
  /// gradient's) is decomposed with the matmul into steps, one per core of the group, each step's
  /// piece of the collective running behind the next step's piece of the matmul (collective
  /// matmul: XLA's windowed einsum), so only the last step's piece waits (true); or it runs after
  /// the whole matmul, in program order (false).
  bool tensor_collectives_overlap_matmuls = false;
  /// The compiler decomposes a matmul with its reduction only when the matmul's largest operand
  /// on a core is at least this large (XLA's windowed-einsum threshold).
  double collective_matmul_min_operand_bytes = 0;
  /// Optional "flash_attention_kernel": whether the generation's software had a fused attention
  /// kernel (flash attention); false makes such a study a what-if and says so. Absent: not known.
  std::optional<bool> flash_attention_kernel;
  /// Vector operations to draw one random number (dropout's mask), per element.
  double random_number_vpu_ops = 0;
  MultiPassKernels normalization_forward;   ///< batch / layer norm: statistics, then normalize
  MultiPassKernels normalization_backward;  ///< gradient statistics, then the input gradient
  MultiPassKernels softmax_forward;         ///< maximum, sum of exponentials, then normalize
  MultiPassKernels softmax_backward;        ///< sum of dy * y, then the input gradient
  /// An int8 / fp8 matmul's peak over the bf16 one (core.int8_peak_ratio_to_bf16,
  /// core.fp8_peak_ratio_to_bf16; absent: the MXUs have no such mode).
  std::optional<double> int8_peak_ratio, fp8_peak_ratio;
  /// Vector operations per element to quantize a matmul operand to 8 bits (its scale's maximum,
  /// the scaling, rounding, clipping and convert; core.quantize_vpu_ops_per_element, read where
  /// the chip has an 8-bit mode).
  double quantize_vpu_ops = 0;
  /// The study's precision.matmul: its layers' products with a weight run in it.
  MatmulPrecision matmul_precision = MatmulPrecision::Bf16;
  /// The peak of `p` over bf16's (1 for bf16), or nullopt where the MXUs lack it.
  std::optional<double> peak_ratio(MatmulPrecision p) const {
    return p == MatmulPrecision::Bf16   ? std::optional<double>(1.0)
           : p == MatmulPrecision::Int8 ? int8_peak_ratio
                                        : fp8_peak_ratio;
  }

  /// What a program's arguments and temporaries can use: the capacity less the runtime's reserve.
  double usable_hbm_bytes() const { return hbm_bytes - hbm_reserved_bytes; }

  const MultiPassKernels& multipass(MultiPass pattern) const {
    switch (pattern) {
      case MultiPass::NormalizationForward:
        return normalization_forward;
      case MultiPass::NormalizationBackward:
        return normalization_backward;
      case MultiPass::SoftmaxForward:
        return softmax_forward;
      case MultiPass::SoftmaxBackward:
        return softmax_backward;
    }
    return normalization_forward;
  }

  /// MXU peak: tensor cores x mxus x rows x cols MACs x 2 FLOP x clock.
  double peak_matmul_flops_per_s() const {
    return double(tensor_cores) * mxus * mxu_rows * mxu_cols * 2.0 * clock_hz;
  }
  /// VPU peak element operations per second.
  double vector_ops_per_s() const {
    return double(tensor_cores) * vpu_sublanes * vpu_lanes * vpu_alus_per_lane_sublane *
           vpu_ops_per_alu_per_cycle * clock_hz;
  }
};

/// One chip: cores and the links leaving it.
struct ChipSpec {
  int cores = 0;                            ///< TensorCores per chip
  double peak_bf16_flops_per_s = 0;         ///< stated peak (checked against the core's derived peak)
  int ici_links = 0;                        ///< ICI links per chip (one per torus neighbour)
  double ici_bandwidth_bytes_per_s = 0;     ///< per link, per direction
  double ici_latency_s = 0;                 ///< per hop
  double onchip_bandwidth_bytes_per_s = 0;  ///< core-to-core on the same chip
  double onchip_latency_s = 0;
  double host_link_bandwidth_bytes_per_s = 0;  ///< PCIe to the host, per chip
  /// DRAM of a host (its host_board_chips' chips): what host offload may fill; 0: not given.
  double host_memory_bytes_per_host = 0;
  /// The block of chips one host feeds (its board): chips along each torus dimension.
  std::vector<int> host_board_chips;
  /// A program can use the chip's TensorCores as one device ("megacore", TPU-v4 on).
  bool megacore = false;
  /// Collective algorithms by name (sim/collectives), in order of preference: each collective
  /// runs the first one that supports its group.
  std::vector<std::string> collective_algorithms;
  /// Buffers up to this size run the list's latency-optimal algorithms (recursive doubling):
  /// fewer steps, each a longer route; larger ones the bandwidth-optimal rings.
  double latency_collective_max_bytes = 0;
  double tdp_w = 0;  ///< thermal design power (information only)
};

/// A box of chips: the N-dimensional torus (or mesh, where a dimension does not wrap around).
struct SliceSpec {
  std::string name;              ///< e.g. "v3-32"; "4x4" for an explicit shape
  std::vector<int> shape;        ///< chips along each torus dimension (dimension 0 first)
  std::vector<bool> wraparound;  ///< whether each dimension has wrap-around links, as described
  int dims() const { return int(shape.size()); }
  int chips() const {
    int n = 1;
    for (int s : shape) n *= s;
    return n;
  }
};

/// The plausible range of an assumed figure (its "range" and "range_source"): a number's
/// [low, high] around its value, or a flag's [false, true] when both are plausible. Prediction
/// intervals move each figure to both ends.
struct FigureRange {
  Json low, high;
  std::string source;
};

/// The data-center network (DCN) that joins slices (hardware key `dcn`, optional): each host
/// (chip.host_board_chips chips) reaches it through its network card, any host reaching any other
/// through a switch fabric that is not the bottleneck.
struct DcnSpec {
  bool present = false;                  ///< the hardware file describes it (several slices need it)
  double nic_bandwidth_bytes_per_s = 0;  ///< per host, each way
  double latency_s = 0;                  ///< one message from a host to a host of another slice
  /// Whether the software stack runs the reductions across slices behind the backward (each
  /// layer's as its gradients are reduced inside the slice) or after it, once the slice's own
  /// reductions are done (`dcn.reductions_overlap_backward`).
  bool reductions_overlap_backward = false;
};

/// A TPU generation.
struct HardwareSpec {
  std::string name;
  std::string description;
  std::string file;  ///< where it was loaded from
  CoreSpec core;
  ChipSpec chip;
  DcnSpec dcn;
  SliceSpec pod;
  /// Where the pod is built of blocks of chips joined by optical circuit switches (TPU-v4: 4x4x4
  /// cubes), the block's shape: a slice is then any box of whole blocks, at most the pod's
  /// number of them (or a box inside one block). Empty: a slice is a box inside the pod.
  std::vector<int> pod_blocks;
  std::map<std::string, SliceSpec> slices;     ///< by cloud name ("v3-32" = 32 cores)
  std::map<std::string, std::string> sources;  ///< JSON path of each figure -> its source
  std::map<std::string, FigureRange> ranges;   ///< JSON path of a figure with a range -> the range
};

/// The configs/ directory: $TPUSIM_CONFIG_DIR, else the one compiled in.
std::filesystem::path config_dir();

/// Parses and validates a hardware description. `context` names it in errors.
/// Throws ConfigError listing every problem.
HardwareSpec parse_hardware(const Json& json, const std::string& context);

/// Loads `name_or_path`: a file path (contains '/' or ends in .json; relative paths are tried
/// against `base_dir` first) or a name under configs/hardware/. Throws ConfigError.
HardwareSpec load_hardware(const std::string& name_or_path, const std::filesystem::path& base_dir = {});

/// The file `load_hardware` reads for `name_or_path`. Throws ConfigError for an unknown name.
std::filesystem::path hardware_file(const std::string& name_or_path,
                                    const std::filesystem::path& base_dir = {});

/// A what-if on a hardware description: each key of `overrides` is a dotted path of `json`
/// ("chip.ici_bandwidth_bytes_per_s_per_link_per_direction", "pod.chips"); a sourced figure gets
/// the new value and the source "override in the study (was V: its source)", anything else is
/// replaced. An unknown path is a problem at `path`.<key>; the result is validated when parsed.
void apply_hardware_overrides(Json& json, const Json& overrides, const std::string& path, Problems& problems);

/// Reads a JSON file; a missing file or malformed JSON is a ConfigError naming the file
/// (and the line/column for a syntax error), and so is one longer than kMaxJsonFileBytes (a
/// device or stream that never ends is refused, not read forever).
inline constexpr std::size_t kMaxJsonFileBytes = std::size_t(64) << 20;
Json read_json_file(const std::filesystem::path& file);

/// Names of the hardware files shipped in configs/hardware.
std::vector<std::string> shipped_hardware();

/// Resolves a study's `slice`: a slice name of the hardware, or {"chips": [x, y, ...],
/// "wraparound": [bool, bool, ...]} with as many dimensions as the hardware's pod. Problems are
/// recorded at `path`.
SliceSpec parse_slice(const Json& value, const std::string& path, const HardwareSpec& hw, Problems& problems);

/// Why a box of chips `shape` is no slice of `hw`'s pod (what a slice must be), or "" when it is
/// one: as many dimensions as the pod, and inside it (or, with pod_blocks, made of whole blocks).
std::string slice_shape_problem(const HardwareSpec& hw, const std::vector<int>& shape);

/// The hardware as a study's devices see it: unchanged without megacore; with it, one device per
/// chip (`chip.cores` = 1) whose core figures are the chip's (`tensor_cores` = the chip's
/// TensorCores; HBM capacity, reserve, bandwidth and vector memory summed over them).
HardwareSpec device_view(const HardwareSpec& hw, bool megacore);

}  // namespace tpusim
