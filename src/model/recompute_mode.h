// train.recompute as an enum, apart from the activation sizing code so the config can name it.
#pragma once
#include "core/enum_names.h"

namespace strata {

// Activation recomputation (Korthikanti et al. 2022): what a layer keeps for backward.
//   none:      everything below.
//   selective: everything but the attention probabilities [b, nh, t, t], which backward
//              recomputes from q and k (the "5as/h" term); flash attention keeps none anyway.
//   full:      only the block output (the next block's input); backward reruns the block.
enum class Recompute { none, selective, full };
template <>
struct EnumNames<Recompute> {
  static constexpr std::string_view names[] = {"none", "selective", "full"};  // train.recompute
};
inline const char* recompute_name(Recompute r) {
  return enum_name(r).data();
}

}  // namespace strata
