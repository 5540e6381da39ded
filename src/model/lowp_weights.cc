#include "model/lowp_weights.h"

namespace strata {

LowpWeights::LowpWeights(ParamStore& params, Arena& arena, Backend& backend, DType precision)
    : params_(&params), backend_(&backend), precision_(precision) {
  // Without resident f32 parameters, convert the gathered group into one transient group-sized
  // slot instead of keeping 2 bytes per parameter of the whole model.
  single_slot_ = params.data() == nullptr;
  data_ = arena.alloc<uint16_t>(
      MemCategory::params, lowp_weight_elements(!single_slot_, params.size(), params.group_sizes()),
      single_slot_ ? "parameters (16-bit copy of the gathered group)"
                   : "parameters (16-bit working copy)");
  const size_t entries = single_slot_ ? 1 : static_cast<size_t>(params.num_groups());
  version_.assign(entries, -1);
  source_.assign(entries, nullptr);
}

const uint16_t* LowpWeights::get(int idx) {
  ParamStore& ps = *params_;
  const ParamInfo& p = ps.info(idx);
  const int g = p.group;
  const float* source = ps.group_params(g);
  // The same group at the same version holds the same values wherever it was gathered to.
  const size_t e = single_slot_ ? 0 : static_cast<size_t>(g);
  const int64_t base = single_slot_ ? 0 : ps.group_offset(g);
  if (version_[e] != ps.version() || source_[e] != source || (single_slot_ && slot_group_ != g)) {
    backend_->to_lowp(precision_, data_ + base, source, ps.group_size(g));
    version_[e] = ps.version();
    source_[e] = source;
    slot_group_ = g;
  }
  return data_ + base + (p.offset - ps.group_offset(g));
}

uint16_t* LowpWeights::bf16_copy_of(const float* param) const {
  if (precision_ != DType::bf16 || single_slot_ || !params_ || !params_->data()) return nullptr;
  const float* base = params_->data();
  if (param < base || param >= base + params_->size()) return nullptr;
  return data_ + (param - base);
}

void LowpWeights::written() {
  for (int g = 0; g < params_->num_groups(); ++g) {
    version_[static_cast<size_t>(g)] = params_->version();
    source_[static_cast<size_t>(g)] = params_->group_params(g);
  }
}

}  // namespace strata
