#include "schedules/layer_cost.hpp"

namespace tpusim {

Keep read_remat(Fields& f, Keep fallback, const SavePolicy*& saves) {
  const Json* v = f.optional("remat");
  if (!v) return fallback;
  if (v->is_boolean()) return v->get<bool>() ? Keep::Input : Keep::All;
  if (v->is_string())
    if (const SavePolicy* policy = find_save_policy(v->get<std::string>())) {
      saves = policy;
      return Keep::Saved;
    }
  f.problems().add(f.path_of("remat"), *v,
                   "false, true (keep each layer's input, recompute its forward) or a save policy: " +
                       save_policy_names(true));
  return fallback;
}

WireDtypes read_wire_dtypes(Fields& f, bool fully_sharded, double weight_bytes) {
  WireDtypes d;
  d.weight_bytes = weight_bytes;
  auto bytes = [&](const char* key) {
    const double given = f.string_or(key, "fp32", {"fp32", "bf16"}) == "bf16" ? 2.0 : 4.0;
    if (given > weight_bytes && f.has(key) && f.problems().empty())
      f.problems().add(f.path_of(key), Json("fp32"),
                       "bf16 or absent: the study's weights are bf16 (precision.weights), and so are their "
                       "gradients");
    return std::min(given, weight_bytes);
  };
  d.gradient_bytes = bytes("gradient_dtype");
  d.gathered_weight_bytes = bytes("gathered_weight_dtype");
  if (f.problems().empty() && !fully_sharded && f.has("gathered_weight_dtype"))
    f.problems().add(
        f.path_of("gathered_weight_dtype"), Json(d.gathered_weight_bytes == 2.0 ? "bf16" : "fp32"),
        "no gathered_weight_dtype unless weight_update is \"fully_sharded\" (only then are weights "
        "gathered per layer)");
  return d;
}

void add_wire_dtypes(Json& resolved, const WireDtypes& d, bool fully_sharded) {
  resolved["gradient_dtype"] = d.gradient_bytes == 2.0 ? "bf16" : "fp32";
  if (fully_sharded) resolved["gathered_weight_dtype"] = d.gathered_weight_bytes == 2.0 ? "bf16" : "fp32";
}

double read_gradient_bucket_bytes(Fields& f, double hardware_bytes, bool fully_sharded) {
  const double bytes = f.positive_or("gradient_bucket_bytes", hardware_bytes);
  if (f.problems().empty() && fully_sharded && f.has("gradient_bucket_bytes"))
    f.problems().add(
        f.path_of("gradient_bucket_bytes"), Json(bytes),
        "no gradient_bucket_bytes with weight_update \"fully_sharded\" (each layer's gradients are "
        "reduce-scattered on their own)");
  return bytes;
}

int read_accumulation_steps(Fields& f, std::int64_t examples_per_replica, bool fully_sharded,
                            int batch_norm_group) {
  const int steps = int(f.integer_or("accumulation_steps", 1, 1, 1 << 20));
  if (!f.problems().empty() || steps == 1) return steps;
  const std::string path = f.path_of("accumulation_steps");
  if (examples_per_replica % steps != 0)
    f.problems().add(path, Json(steps),
                     "a divisor of the " + std::to_string(examples_per_replica) +
                         " examples each replica takes per step (its micro-batches are equal)");
  else if (fully_sharded)
    f.problems().add(path, Json(steps),
                     "1 with weight_update \"fully_sharded\" (gathering the weights per micro-batch is not "
                     "modelled yet)");
  else if (batch_norm_group > 1)
    f.problems().add(
        path, Json(steps),
        "1 with batch_norm_group > 1 (cross-replica statistics per micro-batch are not modelled)");
  return steps;
}

Json remat_json(Keep keep, const SavePolicy& saves) {
  return keep == Keep::All ? Json(false) : keep == Keep::Input ? Json(true) : Json(saves.name());
}

}  // namespace tpusim
