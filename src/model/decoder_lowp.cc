// The 16-bit working copy of the weights under mixed precision: converted from the f32 masters
// on first use after they change, or written by the optimizer as it updates them (bf16).
#include "model/decoder.h"

namespace strata {

const uint16_t* Decoder::lowp_weight(int idx) {
  const ParamInfo& p = params_.info(idx);
  const int g = p.group;
  const float* source = params_.group_params(g);
  // The same group at the same version holds the same values wherever it was gathered to.
  const size_t e = lowp_single_slot_ ? 0 : static_cast<size_t>(g);
  const int64_t base = lowp_single_slot_ ? 0 : params_.group_offset(g);
  if (lowp_version_[e] != params_.version() || lowp_source_[e] != source ||
      (lowp_single_slot_ && lowp_slot_group_ != g)) {
    backend_.to_lowp(precision_, lowp_params_ + base, source, params_.group_size(g));
    lowp_version_[e] = params_.version();
    lowp_source_[e] = source;
    lowp_slot_group_ = g;
  }
  return lowp_params_ + base + (p.offset - params_.group_offset(g));
}

uint16_t* Decoder::bf16_copy_of(const float* param) {
  if (precision_ != DType::bf16 || lowp_single_slot_ || !params_.data()) return nullptr;
  const float* base = params_.data();
  if (param < base || param >= base + params_.size()) return nullptr;
  return lowp_params_ + (param - base);
}

void Decoder::bf16_copy_written() {
  for (int g = 0; g < params_.num_groups(); ++g) {
    lowp_version_[static_cast<size_t>(g)] = params_.version();
    lowp_source_[static_cast<size_t>(g)] = params_.group_params(g);
  }
}

}  // namespace strata
