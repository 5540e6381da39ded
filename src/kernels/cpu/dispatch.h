// STRATA_DISPATCH(fn): the per-level copy of a Highway kernel (HWY_EXPORT(fn) in the same file)
// that isa::active() chose. Use only under `#if HWY_ONCE`, after HWY_EXPORT.
#pragma once
#include <hwy/highway.h>

#include "kernels/cpu/isa.h"

#define STRATA_DISPATCH(fn) ((void)::strata::kernels::isa::active(), HWY_DYNAMIC_DISPATCH(fn))
