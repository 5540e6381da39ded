#include "model/context_attention.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/attention_ranges.h"
#include "kernels/cpu/flash_attention.h"

namespace strata {

namespace {

constexpr int kKvTag = 0x4370;   // ring: key/value blocks
constexpr int kDkvTag = 0x4371;  // ring: their gradient accumulators

int64_t clamp_rows(int64_t x, int64_t hi) {
  return std::clamp<int64_t>(x, 0, hi);
}

void wait(WorkHandle& w) {
  if (w) w->wait();
  w.reset();
}

}  // namespace

// ---- the split and the document starts -------------------------------------------------------

int64_t ContextSplit::global_row(int64_t i, int of) const {
  if (cp == 1) return i;
  const int64_t c = t / (2 * cp);
  return i < c ? of * c + i : (2 * cp - 1 - of) * c + (i - c);
}

int64_t ContextSplit::rows_before(int64_t p, int of) const {
  if (cp == 1) return clamp_rows(p, t);
  const int64_t c = t / (2 * cp);
  return clamp_rows(p - of * c, c) + clamp_rows(p - (2 * cp - 1 - of) * c, c);
}

void document_starts(int32_t* out, const int32_t* tokens, int64_t b, int64_t t, int32_t eos) {
  for (int64_t bb = 0; bb < b; ++bb) {
    int32_t start = 0;
    for (int64_t i = 0; i < t; ++i) {
      out[bb * t + i] = start;
      if (tokens[bb * t + i] == eos) start = static_cast<int32_t>(i + 1);
    }
  }
}

// ---- buffers -----------------------------------------------------------------------------------

template <class A>
void ContextAttention::allocate(A& arena, const ModelConfig& cfg, const ModelShard& shard,
                                int64_t batch, int64_t seq_len, int slots, int cp, int threads) {
  const int64_t n = batch * seq_len, hd = cfg.head_dim();
  const int64_t nh = shard.heads(cfg), nkv = shard.kv_heads(cfg), width = shard.qkv_width(cfg);
  masks_.resize(static_cast<size_t>(slots));
  for (Masks& m : masks_) {
    m.positions = arena.template alloc<int32_t>(MemCategory::activations, n, "context positions");
    m.begin = arena.template alloc<int32_t>(MemCategory::activations, cp * n, "context key begin");
    m.end = arena.template alloc<int32_t>(MemCategory::activations, cp * n, "context key end");
  }
  auto ws = [&](int64_t count, const char* what) {
    return arena.template alloc<float>(MemCategory::workspace, count, what);
  };
  if (options_.impl == CpImpl::ring || cp == 1) {
    const int64_t kv = n * 2 * nkv * hd;
    for (float*& p : kv_) p = ws(kv, "ring key/value block");
    for (float*& p : dkv_) p = ws(kv, "ring key/value gradient");
    out_part_ = ws(n * nh * hd, "ring partial output");
    lse_part_ = ws(batch * nh * seq_len, "ring partial log-sum-exp");
    scratch_ =
        ws(kernels::attention_ranges_backward_scratch(hd, threads), "ring attention scratch");
    return;
  }
  for (float*& p : stage_) p = ws(n * width, "ulysses exchange");
  qkv_u_ = ws(n * width, "ulysses head-split q, k, v");
  out_u_ = ws(n * nh * hd, "ulysses head-split output");
  dout_u_ = ws(n * nh * hd, "ulysses head-split output gradient");
  dqkv_u_ = ws(n * width, "ulysses head-split q, k, v gradient");
  const int64_t t = seq_len * cp;
  scratch_ = ws(
      std::max(kernels::flash_attention_backward_scratch(batch, t, nh / cp, nkv / cp, hd, threads),
               kernels::attention_ranges_backward_scratch(hd, threads)),
      "ulysses attention scratch");
}

ContextAttention::ContextAttention(const ContextOptions& options, const ModelConfig& cfg,
                                   const ModelShard& shard, Arena& arena, Backend& backend,
                                   int64_t batch, int64_t seq_len, int slots)
    : options_(options), backend_(&backend), hd_(cfg.head_dim()) {
  if (!options_.active()) return;
  STRATA_CHECK(cfg.flash_attention(),
               "parallel.cp > 1 and data.document_mask need model.attention = \"flash\" (the "
               "naive kernel materialises the whole T x T scores)");
  const int cp = options_.size();
  rank_ = options_.group ? options_.group->rank() : 0;
  split_ = ContextSplit{seq_len * cp, cp};
  if (options_.impl == CpImpl::ulysses && cp > 1) {
    const int64_t nh = shard.heads(cfg), nkv = shard.kv_heads(cfg);
    STRATA_CHECK(nh % cp == 0 && nkv % cp == 0, "parallel.cp_impl = \"ulysses\" splits the heads ",
                 "over parallel.cp = ", cp, ", but this rank holds ", nh, " query heads and ", nkv,
                 " kv heads (model.n_head / tp, model.n_kv_head / tp); use cp_impl = \"ring\"");
  }
  allocate(arena, cfg, shard, batch, seq_len, slots, cp, /*threads=*/0);
}

MemBytes ContextAttention::bytes(const ModelConfig& cfg, const ModelShard& shard, int64_t batch,
                                 int64_t seq_len, int cp, CpImpl impl, bool document_mask,
                                 int slots, int threads) {
  // allocate() itself, against a counter, with the group size given (the planner has no Comm).
  MemCounter counter;
  if (cp <= 1 && !document_mask) return counter.bytes();
  ContextAttention c;
  c.options_.impl = impl;
  c.allocate(counter, cfg, shard, batch, seq_len, slots, cp, threads);
  return counter.bytes();
}

// ---- masks -------------------------------------------------------------------------------------

void ContextAttention::prepare(int slot, const int32_t* doc_start, int64_t b) {
  Masks& m = masks_[static_cast<size_t>(slot)];
  const int cp = split_.cp;
  const int64_t t = split_.t, L = split_.local(), n = b * L;
  const bool ulysses = options_.impl == CpImpl::ulysses && cp > 1;
  // Computed on the host, then uploaded: the device buffers are the kernels' operands; the
  // ranges' host copies tell the ring which blocks some row sees.
  host_positions_.resize(static_cast<size_t>(n));
  m.host_begin.resize(static_cast<size_t>(ulysses ? b * t : cp * n));
  m.host_end.resize(m.host_begin.size());
  int32_t* positions = host_positions_.data();
  int32_t* begin = m.host_begin.data();
  int32_t* end = m.host_end.data();
  for (int64_t bb = 0; bb < b; ++bb) {
    for (int64_t i = 0; i < L; ++i) {
      const int64_t p = split_.global_row(i, rank_);
      const int64_t d = doc_start ? doc_start[bb * t + p] : 0;
      STRATA_CHECK(d >= 0 && d <= p, "ContextAttention: document start ", d, " of position ", p,
                   " is not at or before it");
      const int64_t row = bb * L + i;
      positions[row] = static_cast<int32_t>(options_.document_mask ? p - d : p);
      if (ulysses) continue;
      for (int step = 0; step < cp; ++step) {
        const int from = (rank_ - step + cp) % cp;  // whose block arrives at this step
        begin[step * n + row] = static_cast<int32_t>(split_.rows_before(d, from));
        end[step * n + row] = static_cast<int32_t>(split_.rows_before(p + 1, from));
      }
    }
  }
  if (ulysses) {  // every row, in global order
    for (int64_t i = 0; i < b * t; ++i) {
      begin[i] = doc_start ? doc_start[i] : 0;
      end[i] = static_cast<int32_t>(i % t + 1);
    }
  }
  const size_t ranges = m.host_begin.size() * sizeof(int32_t);
  backend_->copy_from_host(m.positions, positions, static_cast<size_t>(n) * sizeof(int32_t));
  backend_->copy_from_host(m.begin, begin, ranges);
  backend_->copy_from_host(m.end, end, ranges);
}

namespace {
// Some query row of the n sees a key of this block.
bool any_visible(const int32_t* begin, const int32_t* end, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (begin[i] < end[i]) return true;
  return false;
}
}  // namespace

// ---- ring --------------------------------------------------------------------------------------

void ContextAttention::forward(int slot, float* out, float* lse, const float* qkv,
                               const AttentionShape& s) {
  const Masks& m = masks_[static_cast<size_t>(slot)];
  if (options_.impl == CpImpl::ulysses && split_.cp > 1)
    return ulysses_forward(m, out, lse, qkv, s);
  ring_forward(m, out, lse, qkv, s);
}

void ContextAttention::backward(int slot, float* dqkv, const float* dout, const float* qkv,
                                const float* out, const float* lse, const AttentionShape& s) {
  const Masks& m = masks_[static_cast<size_t>(slot)];
  if (options_.impl == CpImpl::ulysses && split_.cp > 1)
    return ulysses_backward(m, dqkv, dout, qkv, out, lse, s);
  ring_backward(m, dqkv, dout, qkv, out, lse, s);
}

namespace {
// k|v heads of each qkv row -> kv [n, 2 * nkv * hd] (what travels), and back for gradients.
void pack_kv(Backend& backend, float* kv, const float* qkv, const AttentionShape& s) {
  const size_t w = static_cast<size_t>(s.qkv_width()) * 4, q = s.heads * s.head_dim;
  const size_t kvw = static_cast<size_t>(2 * s.kv_heads * s.head_dim) * 4;
  backend.copy_2d(kv, kvw, qkv + q, w, kvw, static_cast<size_t>(s.rows()));
}
void unpack_kv(Backend& backend, float* qkv, const float* kv, const AttentionShape& s) {
  const size_t w = static_cast<size_t>(s.qkv_width()) * 4, q = s.heads * s.head_dim;
  const size_t kvw = static_cast<size_t>(2 * s.kv_heads * s.head_dim) * 4;
  backend.copy_2d(qkv + q, w, kv, kvw, kvw, static_cast<size_t>(s.rows()));
}
}  // namespace

void ContextAttention::ring_forward(const Masks& m, float* out, float* lse, const float* qkv,
                                    const AttentionShape& s) {
  const int cp = split_.cp;
  const int64_t n = s.rows(), hd = s.head_dim, nkv = s.kv_heads;
  const int64_t kvw = 2 * nkv * hd;
  const RangeAttentionShape rs{s.b, s.t, s.t, s.heads, nkv, hd};
  Comm* g = options_.group;
  const int next = (rank_ + 1) % cp, prev = (rank_ - 1 + cp) % cp;
  pack_kv(*backend_, kv_[0], qkv, s);
  bool have = false;  // out/lse hold a block's result
  for (int step = 0; step < cp; ++step) {
    const float* cur = kv_[step % 2];
    WorkHandle sent, received;
    if (step + 1 < cp) {  // the next block travels while this one is computed
      received = g->recv(kv_[(step + 1) % 2], n * kvw, DType::f32, prev, kKvTag);
      sent = g->send(cur, n * kvw, DType::f32, next, kKvTag);
    }
    const int32_t* begin = m.begin + step * n;
    const int32_t* end = m.end + step * n;
    if (any_visible(m.host_begin.data() + step * n, m.host_end.data() + step * n, n)) {
      float* o = have ? out_part_ : out;
      float* l = have ? lse_part_ : lse;
      backend_->attention_ranges_forward(o, l, qkv, s.qkv_width(), cur, cur + nkv * hd, kvw, begin,
                                         end, rs);
      if (have) backend_->attention_ranges_merge(out, lse, out_part_, lse_part_, rs);
      have = true;
    }
    wait(received);
    wait(sent);
  }
  if (!have) {  // no row sees any key (cannot happen with causal rows, which see themselves)
    backend_->attention_ranges_forward(out, lse, qkv, s.qkv_width(), kv_[0], kv_[0] + nkv * hd, kvw,
                                       m.begin, m.end, rs);
  }
}

void ContextAttention::ring_backward(const Masks& m, float* dqkv, const float* dout,
                                     const float* qkv, const float* out, const float* lse,
                                     const AttentionShape& s) {
  const int cp = split_.cp;
  const int64_t n = s.rows(), hd = s.head_dim, nkv = s.kv_heads;
  const int64_t kvw = 2 * nkv * hd;
  const size_t kv_bytes = static_cast<size_t>(n * kvw) * sizeof(float);
  const RangeAttentionShape rs{s.b, s.t, s.t, s.heads, nkv, hd};
  Comm* g = options_.group;
  const int next = (rank_ + 1) % cp, prev = (rank_ - 1 + cp) % cp;
  backend_->zero(dqkv, static_cast<size_t>(n * s.qkv_width()) * sizeof(float));
  pack_kv(*backend_, kv_[0], qkv, s);
  float* part = dkv_[0];  // this step's contribution, then the block's running total
  float* sending = dkv_[1];
  float* incoming = dkv_[2];
  WorkHandle dkv_sent, dkv_received;
  for (int step = 0; step < cp; ++step) {
    const float* cur = kv_[step % 2];
    WorkHandle sent, received;
    if (step + 1 < cp) {
      received = g->recv(kv_[(step + 1) % 2], n * kvw, DType::f32, prev, kKvTag);
      sent = g->send(cur, n * kvw, DType::f32, next, kKvTag);
    }
    backend_->zero(part, kv_bytes);
    const int32_t* begin = m.begin + step * n;
    const int32_t* end = m.end + step * n;
    if (any_visible(m.host_begin.data() + step * n, m.host_end.data() + step * n, n))
      backend_->attention_ranges_backward(dqkv, part, part + nkv * hd, scratch_, dout, qkv,
                                          s.qkv_width(), cur, cur + nkv * hd, kvw, out, lse, begin,
                                          end, rs);
    if (step > 0) {  // the block's gradient from the ranks it visited before
      wait(dkv_received);
      backend_->add_inplace(part, incoming, n * kvw);
    }
    if (cp > 1) {  // on to the next holder (after the last step: home to the block's owner)
      wait(dkv_sent);
      std::swap(part, sending);
      dkv_sent = g->send(sending, n * kvw, DType::f32, next, kDkvTag);
      dkv_received = g->recv(incoming, n * kvw, DType::f32, prev, kDkvTag);
    }
    wait(received);
    wait(sent);
  }
  if (cp > 1) {
    wait(dkv_received);  // this rank's own block, summed over every query rank
    wait(dkv_sent);
    unpack_kv(*backend_, dqkv, incoming, s);
  } else {
    unpack_kv(*backend_, dqkv, part, s);
  }
}

// ---- Ulysses -----------------------------------------------------------------------------------

namespace {
// Rows [n, all heads of each group] <-> cp blocks [n, heads / cp of each group]: block j holds
// rank j's share of every group's heads. The direction is `to_blocks`; the other side is only
// read. One strided copy per (block, group).
void head_blocks(Backend& backend, float* rows, float* blocks, const std::vector<int64_t>& heads,
                 int cp, int64_t hd, int64_t n, bool to_blocks) {
  int64_t full = 0, mine = 0;
  for (int64_t h : heads) full += h * hd, mine += h / cp * hd;
  for (int j = 0; j < cp; ++j) {
    int64_t off = 0, block_off = 0;
    for (int64_t h : heads) {
      const int64_t w = h / cp * hd;
      float* row = rows + off + j * w;
      float* block = blocks + j * n * mine + block_off;
      const size_t row_pitch = static_cast<size_t>(full) * 4;
      const size_t block_pitch = static_cast<size_t>(mine) * 4;
      backend.copy_2d(to_blocks ? block : row, to_blocks ? block_pitch : row_pitch,
                      to_blocks ? row : block, to_blocks ? row_pitch : block_pitch,
                      static_cast<size_t>(w) * 4, static_cast<size_t>(n));
      off += h * hd;
      block_off += w;
    }
  }
}
}  // namespace

void ContextAttention::global_rows(float* blocks, float* global, int64_t width,
                                   const AttentionShape& s, bool to_global) const {
  // Block i's rows are rank i's local rows: per sequence, its two chunks, each contiguous in
  // the block and in the global order.
  const int64_t n = s.rows(), L = s.t, t = split_.t, c = t / (2 * split_.cp);
  const size_t bytes = static_cast<size_t>(c * width) * 4;
  for (int i = 0; i < split_.cp; ++i) {
    for (int64_t bb = 0; bb < s.b; ++bb) {
      for (int64_t first : {int64_t{0}, c}) {
        float* g = global + (bb * t + split_.global_row(first, i)) * width;
        float* b = blocks + (i * n + bb * L + first) * width;
        backend_->copy(to_global ? g : b, to_global ? b : g, bytes);
      }
    }
  }
}

void ContextAttention::exchange(const std::vector<int64_t>& heads, const AttentionShape& s) {
  int64_t mine = 0;
  for (int64_t h : heads) mine += h / split_.cp * s.head_dim;
  std::vector<int64_t> counts(static_cast<size_t>(split_.cp), s.rows() * mine);
  options_.group->all_to_all_v(stage_[0], counts.data(), stage_[1], counts.data(), DType::f32)
      ->wait();
}

void ContextAttention::seq_to_heads(const float* local, float* global,
                                    const std::vector<int64_t>& heads, const AttentionShape& s) {
  // Block j of the send buffer: this rank's rows, rank j's heads; received block i: rank i's
  // rows (its local order), this rank's heads, put in global row order.
  head_blocks(*backend_, const_cast<float*>(local), stage_[0], heads, split_.cp, s.head_dim,
              s.rows(), /*to_blocks=*/true);  // `local` is only read
  exchange(heads, s);
  int64_t mine = 0;
  for (int64_t h : heads) mine += h / split_.cp * s.head_dim;
  global_rows(stage_[1], global, mine, s, /*to_global=*/true);
}

void ContextAttention::heads_to_seq(const float* global, float* local,
                                    const std::vector<int64_t>& heads, const AttentionShape& s) {
  int64_t mine = 0;
  for (int64_t h : heads) mine += h / split_.cp * s.head_dim;
  global_rows(stage_[0], const_cast<float*>(global), mine, s, /*to_global=*/false);  // only read
  exchange(heads, s);
  head_blocks(*backend_, local, stage_[1], heads, split_.cp, s.head_dim, s.rows(),
              /*to_blocks=*/false);
}

void ContextAttention::ulysses_forward(const Masks& m, float* out, float* lse, const float* qkv,
                                       const AttentionShape& s) {
  const int cp = split_.cp;
  const AttentionShape u{s.b, split_.t, s.heads / cp, s.kv_heads / cp, s.head_dim};
  seq_to_heads(qkv, qkv_u_, {s.heads, s.kv_heads, s.kv_heads}, s);
  // lse [b, nh / cp, t] has as many elements as the local [b, nh, t / cp]: it is kept there.
  if (!options_.document_mask) {
    backend_->flash_attention_forward(DType::f32, out_u_, lse, qkv_u_, u);
  } else {
    const int64_t w = u.qkv_width(), hd = u.head_dim;
    backend_->attention_ranges_forward(out_u_, lse, qkv_u_, w, qkv_u_ + u.heads * hd,
                                       qkv_u_ + (u.heads + u.kv_heads) * hd, w, m.begin, m.end,
                                       {u.b, u.t, u.t, u.heads, u.kv_heads, hd});
  }
  heads_to_seq(out_u_, out, {s.heads}, s);
}

void ContextAttention::ulysses_backward(const Masks& m, float* dqkv, const float* dout,
                                        const float* qkv, const float* out, const float* lse,
                                        const AttentionShape& s) {
  const int cp = split_.cp;
  const AttentionShape u{s.b, split_.t, s.heads / cp, s.kv_heads / cp, s.head_dim};
  // The head-split q, k, v and output again (not kept: see the top of the header).
  seq_to_heads(qkv, qkv_u_, {s.heads, s.kv_heads, s.kv_heads}, s);
  seq_to_heads(out, out_u_, {s.heads}, s);
  seq_to_heads(dout, dout_u_, {s.heads}, s);
  if (!options_.document_mask) {
    backend_->flash_attention_backward(DType::f32, dqkv_u_, scratch_, dout_u_, qkv_u_, out_u_, lse,
                                       u);
  } else {
    const int64_t w = u.qkv_width(), hd = u.head_dim;
    backend_->zero(dqkv_u_, static_cast<size_t>(u.rows() * w) * sizeof(float));
    const float* k = qkv_u_ + u.heads * hd;
    const float* v = qkv_u_ + (u.heads + u.kv_heads) * hd;
    backend_->attention_ranges_backward(
        dqkv_u_, dqkv_u_ + u.heads * hd, dqkv_u_ + (u.heads + u.kv_heads) * hd, scratch_, dout_u_,
        qkv_u_, w, k, v, w, out_u_, lse, m.begin, m.end, {u.b, u.t, u.t, u.heads, u.kv_heads, hd});
  }
  heads_to_seq(dqkv_u_, dqkv, {s.heads, s.kv_heads, s.kv_heads}, s);
}

}  // namespace strata
