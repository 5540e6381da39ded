#include "plan/plan_report.h"

#include <cstdio>
#include <limits>

#include "core/error.h"
#include "plan/units.h"
#include "run/run_plan.h"

namespace strata {

nlohmann::json planned_layout_json(const PlannedLayout& l) {
  const ParallelConfig& p = l.config.parallel;
  nlohmann::json memory;
  for (int c = 0; c < kNumMemCategories; ++c)
    memory[std::string(mem_category_name(static_cast<MemCategory>(c)))] = l.memory.bytes[c];
  memory["total"] = l.memory.total;
  memory["pp_rank"] = l.memory.pp_rank;
  memory["activation_bytes_per_layer"] = l.memory.activation_bytes_per_layer;
  memory["micro_batches_in_flight"] = l.memory.micro_batches_in_flight;
  memory["capacity"] = l.capacity;
  memory["fits"] = l.fits();
  memory["notes"] = l.memory.notes;
  nlohmann::json j = {{"layout",
                       {{"tp", p.tp},
                        {"pp", p.pp},
                        {"dp", data_parallel_size(p, l.world)},
                        {"ep", p.ep},
                        {"cp", p.cp},
                        {"cp_impl", enum_name(p.cp_impl)},
                        {"vpp", p.vpp},
                        {"sp", p.sp},
                        {"zero", p.zero},
                        {"schedule", enum_name(p.schedule)},
                        {"micro_batch", l.config.train.batch_size},
                        {"micro_batches", micro_batches_per_step(l.config)},
                        {"recompute", enum_name(l.config.train.recompute)},
                        {"precision", enum_name(l.config.train.precision)},
                        {"attention", enum_name(l.config.model.attention)},
                        {"offload", enum_name(l.config.optim.offload)}}},
                      {"describe", l.describe()},
                      {"memory", memory}};
  if (l.step.step_s > 0)
    j["step"] = {{"step_s", l.step.step_s},
                 {"compute_s", l.step.compute_s},
                 {"recompute_s", l.step.recompute_s},
                 {"optimizer_s", l.step.optimizer_s},
                 {"comm_exposed_s", l.step.comm_exposed_s},
                 {"bubble_s", l.step.bubble_s},
                 {"tp_comm_s", l.step.tp_comm_s},
                 {"dp_comm_s", l.step.dp_comm_s},
                 {"pp_comm_s", l.step.pp_comm_s},
                 {"ep_comm_s", l.step.ep_comm_s},
                 {"cp_comm_s", l.step.cp_comm_s},
                 {"cp_hidden_s", l.step.cp_hidden_s},
                 {"tokens_per_s", l.step.tokens_per_s},
                 {"mfu", l.step.mfu}};
  return j;
}

nlohmann::json cluster_json(const ClusterProfile& c) {
  return {{"name", c.name},
          {"device", c.device.name},
          {"device_memory", c.device.memory_bytes},
          {"gpus_per_node", c.gpus_per_node},
          {"intra", {{"kind", c.intra.kind}, {"bandwidth", c.intra.bandwidth}}},
          {"inter", {{"kind", c.inter.kind}, {"bandwidth", c.inter.bandwidth}}}};
}

std::string format_memory(const PlannedLayout& l) {
  std::string out;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (l.memory.bytes[c] == 0) continue;
    char line[96];
    std::snprintf(line, sizeof line, "    %-12s %12s\n",
                  std::string(mem_category_name(static_cast<MemCategory>(c))).c_str(),
                  format_bytes(static_cast<double>(l.memory.bytes[c])).c_str());
    out += line;
  }
  out += cat("    total        ", format_bytes(static_cast<double>(l.memory.total)));
  if (l.capacity < std::numeric_limits<int64_t>::max())
    out += cat(" of ", format_bytes(static_cast<double>(l.capacity)),
               l.fits() ? " (fits)" : " (DOES NOT FIT)");
  out += "\n";
  for (const std::string& note : l.memory.notes) out += cat("    note: ", note, "\n");
  return out;
}

std::string format_step(const StepEstimate& s) {
  if (s.step_s <= 0) return "";
  const auto pct = [&](double part) { return 100 * part / s.step_s; };
  char line[256];
  std::snprintf(line, sizeof line,
                "step %s, %s tokens/s, MFU %.1f%%: compute %.0f%% (recompute %.0f%%), exposed "
                "communication %.0f%%, bubble %.0f%%, optimizer %.0f%%",
                format_seconds(s.step_s).c_str(), format_count(s.tokens_per_s).c_str(), 100 * s.mfu,
                pct(s.compute_s), pct(s.recompute_s), pct(s.comm_exposed_s), pct(s.bubble_s),
                pct(s.optimizer_s));
  std::string out = line;
  if (s.cp_comm_s > 0) {  // context parallelism: its exchanges, and what attention hides of them
    std::snprintf(line, sizeof line, "; cp exchanges %s, %.0f%% hidden behind attention",
                  format_seconds(s.cp_comm_s).c_str(), 100 * s.cp_hidden_s / s.cp_comm_s);
    out += line;
  }
  return out;
}

std::string format_ranking(const std::vector<PlannedLayout>& layouts) {
  std::string out =
      "   #  tp  pp    dp  ep  cp vpp sp zero   mb x  m  recompute    mem/rank      step    "
      "tokens/s    MFU  comm bubble\n";
  int i = 0;
  for (const PlannedLayout& l : layouts) {
    const ParallelConfig& p = l.config.parallel;
    const StepEstimate& s = l.step;
    char line[256];
    std::snprintf(
        line, sizeof line,
        "  %2d %3lld %3lld %5lld %3lld %3lld %3lld %2s %4lld %4lld x %2lld  %-9s %11s %9s %11s "
        "%5.1f%% %4.0f%% %5.0f%%\n",
        ++i, static_cast<long long>(p.tp), static_cast<long long>(p.pp),
        static_cast<long long>(data_parallel_size(p, l.world)), static_cast<long long>(p.ep),
        static_cast<long long>(p.cp), static_cast<long long>(p.vpp), p.sp ? "y" : "-",
        static_cast<long long>(p.zero), static_cast<long long>(l.config.train.batch_size),
        static_cast<long long>(micro_batches_per_step(l.config)),
        enum_name(l.config.train.recompute).data(),
        format_bytes(static_cast<double>(l.memory.total)).c_str(), format_seconds(s.step_s).c_str(),
        format_count(s.tokens_per_s).c_str(), 100 * s.mfu,
        s.step_s > 0 ? 100 * s.comm_exposed_s / s.step_s : 0.0,
        s.step_s > 0 ? 100 * s.bubble_s / s.step_s : 0.0);
    out += line;
  }
  return out;
}

}  // namespace strata
