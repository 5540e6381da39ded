// ContextAttention: attention over a sequence split across a context-parallel group (parallel.cp,
// carved out of dp: comm/layout.h), and document masking of packed sequences (data.document_mask).
// The rest of the model is row-wise, so this is the only unit that sees other ranks' rows.
//
// The split (ContextSplit): a sequence of t rows is cut into 2 * cp chunks of t / (2cp) rows and
// rank r holds chunks r and 2cp-1-r (Megatron-Core's and torchtitan's causal load balancing):
// under a causal mask every rank then does the same attention work. The local rows keep their
// global positions (RoPE and learned positions read them), and they are increasing, which is
// what makes each query row's visible keys one contiguous range in any rank's local rows.
//
// Masks (per micro-batch slot, from the document starts of the whole sequences): each local
// query row's key range [begin, end) in every rank's rows: keys at global positions in
// [doc_start(q), q]. Without document masking doc_start is 0, which is plain causal attention.
// The block kernel is Backend::attention_ranges_* (kernels/cpu/attention_ranges.h).
//
// parallel.cp_impl:
//  - "ring": the key/value blocks travel around the group (asynchronous send/recv, only the kv
//    heads: GQA-aware) while the block that has arrived is computed; the partial outputs merge
//    by their log-sum-exp. Backward: the same ring, with each block's dk/dv accumulator
//    travelling behind it and arriving home after cp hops. A block no query row sees (ranges
//    all empty) is not computed. With cp = 1 (document masking alone) it is one local block.
//  - "ulysses" (DeepSpeed-Ulysses): an all-to-all turns the sequence split into a head split
//    (each rank gets every row of nh / cp query heads and nkv / cp kv heads), attention runs on
//    the whole sequence locally (flash attention, or the range kernel under document masking),
//    and a second all-to-all turns the output back. Nothing beyond the usual activations is
//    kept: backward repeats the forward all-to-alls of q, k, v and of the output (their cost is
//    in the planner) instead of keeping the head-split copies, so activations stay 1/cp.
//
// q, k, v are f32 here: under bf16 training they hold the bf16-rounded values (attention math in
// f32 on the values the GEMMs produced), as the non-flash kernels do.
//
// Every buffer is the backend's memory and is touched only through it (kernels, copies, the
// group's operations), so the same code runs on the CPU and on a GPU (the cp group's route then
// stages its sends through host memory and runs the all-to-all on NCCL: comm/nccl). The masks
// are computed on the host once per micro-batch and uploaded.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "core/arena.h"
#include "core/enum_names.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/cp_impl.h"
#include "model/shard.h"

namespace strata {

struct ContextOptions {
  Comm* group = nullptr;  // the context-parallel group (null: cp = 1)
  CpImpl impl = CpImpl::ring;
  bool document_mask = false;  // attention within each document, positions restarting
  int size() const { return group ? group->size() : 1; }
  // Attention goes through ContextAttention (otherwise the plain causal kernels serve).
  bool active() const { return size() > 1 || document_mask; }
};

// Where a cp rank's local rows sit in a sequence of t rows.
struct ContextSplit {
  int64_t t = 0;  // the whole sequence
  int cp = 1;
  int64_t local() const { return t / cp; }  // rows per rank
  // Global position of local row i of rank `of`.
  int64_t global_row(int64_t i, int of) const;
  // How many of rank `of`'s local rows are at global positions below p.
  int64_t rows_before(int64_t p, int of) const;
};

// Document starts of packed sequences: out[b * t] = the global position where each row's
// document begins; a document ends at each `eos` token (the row after an eos starts a new one).
void document_starts(int32_t* out, const int32_t* tokens, int64_t b, int64_t t, int32_t eos);

class ContextAttention {
 public:
  ContextAttention() = default;  // inactive
  // `seq_len`: this rank's rows per sequence (t / cp); `slots`: micro-batch slots in flight
  // (each has its masks). Buffers from `arena`: masks as activations, the rest workspace.
  ContextAttention(const ContextOptions& options, const ModelConfig& cfg, const ModelShard& shard,
                   Arena& arena, Backend& backend, int64_t batch, int64_t seq_len, int slots);
  // What the constructor allocates, by category (the planner's count). `threads`: the OpenMP
  // threads the ranks run (the attention scratch is per thread; 0: omp_get_max_threads(), what
  // the constructor sees in a rank).
  static MemBytes bytes(const ModelConfig& cfg, const ModelShard& shard, int64_t batch,
                        int64_t seq_len, int cp, CpImpl impl, bool document_mask, int slots,
                        int threads = 0);

  bool active() const { return options_.active(); }
  const ContextSplit& split() const { return split_; }
  int rank() const { return rank_; }

  // Slot `slot`'s masks and positions for b sequences (b <= batch) whose document starts are
  // doc_start (host [b, split().t], global positions; null: each sequence one document).
  void prepare(int slot, const int32_t* doc_start, int64_t b);
  // Each local row's position (for RoPE and learned positions), [b * seq_len].
  const int32_t* positions(int slot) const { return masks_[slot].positions; }

  // out [n, nh*hd] and lse [b, nh, seq_len] from the local qkv [n, qkv_width] (s: local shape).
  void forward(int slot, float* out, float* lse, const float* qkv, const AttentionShape& s);
  // dqkv [n, qkv_width] (overwritten) from dout, given forward's out and lse.
  void backward(int slot, float* dqkv, const float* dout, const float* qkv, const float* out,
                const float* lse, const AttentionShape& s);

 private:
  struct Masks {
    // Device buffers (the backend's memory), the kernels' operands.
    int32_t* positions = nullptr;  // [n]
    int32_t* begin = nullptr;      // ring: [cp][n] per source rank step; ulysses: [b, t]
    int32_t* end = nullptr;
    // The ranges' host copies as prepare() made them (the ring skips the blocks no row sees).
    std::vector<int32_t> host_begin, host_end;
  };
  // The buffers, from an Arena or (bytes()) a MemCounter; `threads` sizes the attention scratch.
  template <class A>
  void allocate(A& arena, const ModelConfig& cfg, const ModelShard& shard, int64_t batch,
                int64_t seq_len, int slots, int cp, int threads);
  void ring_forward(const Masks& m, float* out, float* lse, const float* qkv,
                    const AttentionShape& s);
  void ring_backward(const Masks& m, float* dqkv, const float* dout, const float* qkv,
                     const float* out, const float* lse, const AttentionShape& s);
  void ulysses_forward(const Masks& m, float* out, float* lse, const float* qkv,
                       const AttentionShape& s);
  void ulysses_backward(const Masks& m, float* dqkv, const float* dout, const float* qkv,
                        const float* out, const float* lse, const AttentionShape& s);
  // Ulysses' two exchanges over column groups of `widths` heads each (q, k, v: nh, nkv, nkv;
  // the output: nh): local rows x all heads <-> all rows (global order) x this rank's heads.
  void seq_to_heads(const float* local, float* global, const std::vector<int64_t>& heads,
                    const AttentionShape& s);
  void heads_to_seq(const float* global, float* local, const std::vector<int64_t>& heads,
                    const AttentionShape& s);
  // cp blocks of rows, each in its source rank's local order <-> rows in global order.
  void global_rows(float* blocks, float* global, int64_t width, const AttentionShape& s,
                   bool to_global) const;
  // The all-to-all of Ulysses: stage_[0] (cp blocks out) -> stage_[1] (cp blocks in).
  void exchange(const std::vector<int64_t>& heads, const AttentionShape& s);

  ContextOptions options_;
  ContextSplit split_;
  int rank_ = 0;
  Backend* backend_ = nullptr;
  std::vector<Masks> masks_;
  int64_t hd_ = 0;
  // Workspace (shared by every layer). Ring: kv[2] blocks in flight, dkv[3] accumulators
  // (computing, sending, receiving), a partial out and lse. Ulysses: two staging buffers of the
  // exchange, the head-split q|k|v, output, output gradient and q|k|v gradient.
  float* kv_[2] = {nullptr, nullptr};
  float* dkv_[3] = {nullptr, nullptr, nullptr};
  float* out_part_ = nullptr;
  float* lse_part_ = nullptr;
  float* stage_[2] = {nullptr, nullptr};
  float* qkv_u_ = nullptr;
  float* out_u_ = nullptr;
  float* dout_u_ = nullptr;
  float* dqkv_u_ = nullptr;
  float* scratch_ = nullptr;             // the attention backward's
  std::vector<int32_t> host_positions_;  // prepare()'s positions before their upload
};

}  // namespace strata
