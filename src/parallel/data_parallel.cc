#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/trace.h"
#include "model/decoder.h"

namespace strata {

namespace {
constexpr int kGradSlots = 2;   // the bucket being filled and one being reduced
constexpr int kParamSlots = 3;  // in use, prefetched, and a tied head's embedding
}  // namespace

DataParallel::DataParallel(Comm& dp, const DataParallelOptions& options, Comm* expert_dp)
    : comm_(dp), expert_comm_(expert_dp ? expert_dp : &dp), opt_(options), size_(dp.size()) {
  STRATA_CHECK(opt_.zero >= 0 && opt_.zero <= 3, "parallel.zero: stage ", opt_.zero,
               " does not exist (0, 1, 2 or 3)");
  STRATA_CHECK(opt_.bucket_elements >= 1, "parallel.bucket_mb: must be positive");
  STRATA_CHECK(opt_.reduce_dtype == DType::f32 || opt_.reduce_dtype == DType::bf16,
               "parallel.grad_reduce_dtype: gradients reduce in f32 or bf16");
}

std::vector<DataParallel::BucketShape> DataParallel::plan_buckets(
    const std::vector<int64_t>& group_sizes, int64_t bucket_elements, int dp,
    const std::vector<char>& expert_groups, int edp) {
  // Buckets of whole groups of one kind in layout order (descending group index), each at least
  // bucket_elements unless it is the last of its kind; padding makes each a multiple of the size
  // of the group that reduces it.
  std::vector<BucketShape> out;
  BucketShape current;
  bool open = false;
  auto close = [&] {
    const int64_t n = current.ranks;
    current.padded = (current.unpadded + n - 1) / n * n;
    out.push_back(current);
    current = BucketShape();
    open = false;
  };
  auto is_expert = [&](int g) {
    return g < static_cast<int>(expert_groups.size()) && expert_groups[g] != 0;
  };
  for (int g = static_cast<int>(group_sizes.size()) - 1; g >= 0; --g) {
    if (group_sizes[g] == 0) continue;  // a group another pipeline stage holds
    if (open && current.expert != is_expert(g)) close();
    if (!open) {
      current.first_group = g;
      current.expert = is_expert(g);
      current.ranks = current.expert ? edp : dp;
    }
    open = true;
    current.last_group = g;
    current.unpadded += group_sizes[g];
    if (current.unpadded >= bucket_elements) close();
  }
  if (open) close();
  return out;
}

DataParallel::Sizes DataParallel::sizes(const std::vector<int64_t>& group_sizes,
                                        int64_t bucket_elements, int dp,
                                        const std::vector<char>& expert_groups, int edp) {
  Sizes s;
  for (const BucketShape& b : plan_buckets(group_sizes, bucket_elements, dp, expert_groups, edp)) {
    s.flat += b.padded;
    s.shard += b.padded / b.ranks;
    s.max_padded = std::max(s.max_padded, b.padded);
    s.max_slice = std::max(s.max_slice, b.padded / b.ranks);
    ++s.buckets;
  }
  return s;
}

std::vector<char> DataParallel::expert_groups(const ParamStore& params) {
  std::vector<char> out(static_cast<size_t>(params.group_sizes().size()), 0);
  for (const ParamInfo& p : params.all())
    if (p.slice.expert) out[static_cast<size_t>(p.group)] = 1;
  return out;
}

void DataParallel::plan(ParamStore& params) {
  const std::vector<int64_t> sizes = params.group_sizes();
  bucket_of_group_.assign(sizes.size(), -1);
  buckets_.clear();
  const std::vector<char> experts = expert_groups(params);
  for (const ParamInfo& p : params.all())
    STRATA_CHECK(p.slice.expert == (experts[static_cast<size_t>(p.group)] != 0),
                 "DataParallel: parameter group ", p.group,
                 " mixes experts with other parameters (", p.name, ")");
  for (const BucketShape& shape :
       plan_buckets(sizes, opt_.bucket_elements, size_, experts, expert_comm_->size())) {
    Bucket b;
    b.comm = shape.expert ? expert_comm_ : &comm_;
    b.rank = b.comm->rank();
    b.size = b.comm->size();
    for (int g = shape.first_group; g >= shape.last_group; --g) {
      if (sizes[g] == 0) continue;
      b.groups.push_back(g);
      bucket_of_group_[g] = static_cast<int>(buckets_.size());
    }
    b.padded = shape.padded;
    params.set_group_padding(shape.last_group, shape.padded - shape.unpadded);
    buckets_.push_back(b);
  }
  params.set_residency(/*params=*/opt_.zero < 3, /*grads=*/opt_.zero < 2);
}

namespace {
// setup()'s buffers, against the Arena or a MemCounter (DataParallel::setup_bytes).
template <class A, class GradSlots, class ParamSlots>
void stage_buffers(A& arena, const DataParallelOptions& o, int dp, int64_t flat, int64_t shard,
                   int64_t max_padded, int64_t max_slice, uint16_t*& reduce_lp, float*& shard_grads,
                   GradSlots& grad_slots, float*& shard_params, ParamSlots& param_slots) {
  const bool bf16 = o.reduce_dtype == DType::bf16;
  // Stages 0/1 on one rank reduce nothing (launch_bucket), so they need no bf16 copy either.
  if (bf16 && o.zero < 2 && dp > 1)
    reduce_lp = arena.template alloc<uint16_t>(MemCategory::comm, flat, "gradients in bf16");
  if (o.zero >= 2) {
    shard_grads = arena.template alloc<float>(MemCategory::grads, shard, "gradient shard");
    grad_slots.resize(kGradSlots);
    for (auto& s : grad_slots) {
      s.data =
          arena.template alloc<float>(MemCategory::comm, max_padded, "gradient bucket staging");
      s.reduced =
          arena.template alloc<float>(MemCategory::comm, max_slice + 1, "reduced gradient slice");
      if (bf16) {
        s.data_lp =
            arena.template alloc<uint16_t>(MemCategory::comm, max_padded, "bf16 gradient bucket");
        s.reduced_lp = arena.template alloc<uint16_t>(MemCategory::comm, max_slice + 1,
                                                      "bf16 reduced gradient slice");
      }
    }
  }
  if (o.zero >= 3) {
    shard_params = arena.template alloc<float>(MemCategory::params, shard, "parameter shard");
    param_slots.resize(kParamSlots);
    for (auto& s : param_slots)
      s.data =
          arena.template alloc<float>(MemCategory::comm, max_padded, "parameter bucket staging");
  }
}
}  // namespace

MemBytes DataParallel::setup_bytes(const DataParallelOptions& options, int dp, const Sizes& s) {
  MemCounter counter;
  uint16_t* reduce_lp = nullptr;
  float *shard_grads = nullptr, *shard_params = nullptr;
  std::vector<GradSlot> grad_slots;
  std::vector<ParamSlot> param_slots;
  stage_buffers(counter, options, dp, s.flat, s.shard, s.max_padded, s.max_slice, reduce_lp,
                shard_grads, grad_slots, shard_params, param_slots);
  return counter.bytes();
}

void DataParallel::setup(ParamStore& params, Arena& arena) {
  params_ = &params;
  int64_t local = 0;
  for (Bucket& b : buckets_) {
    b.start = params.group_offset(b.groups.front());
    b.slice = b.padded / b.size;
    b.local = local;
    local += b.slice;
    max_padded_ = std::max(max_padded_, b.padded);
    max_slice_ = std::max(max_slice_, b.slice);
  }
  shard_size_ = local;
  stage_buffers(arena, opt_, size_, params.size(), shard_size_, max_padded_, max_slice_, reduce_lp_,
                shard_grads_, grad_slots_, shard_params_, param_slots_);
}

void DataParallel::init_params(const ModelConfig& config, uint64_t seed) {
  // Host memory is written in place; a device's parameters are computed into a host staging
  // buffer and copied over, one run at a time (as Decoder::init).
  const bool in_place = backend().memory() == nullptr;
  std::vector<float> staging;
  auto init = [&](const ParamInfo& p, int64_t begin, int64_t count, float* dst) {
    if (in_place) {
      init_param_elements(config, p, seed, begin, count, dst);
      return;
    }
    staging.resize(static_cast<size_t>(count));
    init_param_elements(config, p, seed, begin, count, staging.data());
    backend().copy_from_host(dst, staging.data(), static_cast<size_t>(count) * sizeof(float));
  };
  if (opt_.zero < 3) {
    for (int i = 0; i < params_->count(); ++i)
      init(params_->info(i), 0, params_->info(i).numel, params_->param(i));
    return;
  }
  // Only the owned slice of each parameter: elements are indexed globally, so the shard holds
  // exactly the values a single process would have there.
  for (const Bucket& b : buckets_)
    for (const ParamInfo& p : params_->all())
      if (const OwnedRun r = owned_run(b, p); r.count > 0)
        init(p, r.begin, r.count, shard_params_ + r.shard_offset);
}

DataParallel::OwnedRun DataParallel::owned_run(const Bucket& b, const ParamInfo& p) const {
  const int64_t lo = owned_begin(b), hi = lo + b.slice;
  const int64_t a = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
  if (a >= e) return {};
  return {b.local + (a - lo), a - p.offset, e - a};
}

// ---- step protocol -----------------------------------------------------------------------------

void DataParallel::begin_step() {
  for (Bucket& b : buckets_) b.remaining = static_cast<int>(b.groups.size());
  if (opt_.zero < 2) {
    params_->zero_grads();
  } else {
    backend().zero(shard_grads_, static_cast<size_t>(shard_size_) * sizeof(float));
  }
  // Stage 3: the shard changed at the last update, so gathered copies are stale.
  for (ParamSlot& s : param_slots_) {
    if (s.work) s.work->wait();
    s = ParamSlot{s.data, -1, 0, nullptr, 0};
  }
  for (Bucket& b : buckets_) b.param_slot = -1;
}

void DataParallel::begin_micro_batch(bool last) {
  last_micro_batch_ = last;
  // Stages 0/1 count only the last micro-batch's end_grads (reset at begin_step), so that a
  // pipeline may announce the last micro-batch chunk by chunk, between other micro-batches'
  // backward passes; stages 2/3 reduce every micro-batch.
  if (opt_.zero >= 2)
    for (Bucket& b : buckets_) b.remaining = static_cast<int>(b.groups.size());
}

void DataParallel::begin_forward() {
  backward_ = false;
}
void DataParallel::begin_backward() {
  backward_ = true;
}

void DataParallel::launch_bucket(int k) {
  Bucket& b = buckets_[k];
  const bool bf16 = opt_.reduce_dtype == DType::bf16;
  // Each rank's gradients are of the mean over its own tokens, and the reduction averages them.
  // An expert's gradient on its rank already sums over the tokens of all ep ranks, which sent it
  // their rows, so the average over the expert-data-parallel group alone would leave it ep times
  // the dp average: it is scaled by edp / dp = 1 / ep first (Megatron-Core's gradient scaling
  // factor of expert parameters).
  const int ep = size_ / expert_comm_->size();
  const bool rescale = b.comm == expert_comm_ && &comm_ != expert_comm_ && ep > 1;
  if (rescale) {
    float* g = opt_.zero < 2 ? params_->grads() + b.start : grad_slots_[b.grad_slot].data;
    backend().scale_inplace(g, 1.0f / static_cast<float>(ep), b.padded);
  }
  if (opt_.zero < 2) {
    // One rank (a process that runs alone, or a job of one; experts held by one rank of the
    // expert-data-parallel group): the average over one replica is the gradient itself; nothing
    // is sent, and bf16 does not round it.
    if (b.size == 1) return;
    if (bf16) {
      backend().to_lowp(DType::bf16, reduce_lp_ + b.start, params_->grads() + b.start, b.padded);
      pending_.push_back(
          b.comm->all_reduce(reduce_lp_ + b.start, b.padded, DType::bf16, ReduceOp::avg));
    } else {
      pending_.push_back(
          b.comm->all_reduce(params_->grads() + b.start, b.padded, DType::f32, ReduceOp::avg));
    }
    pending_buckets_.push_back(k);
    return;
  }
  GradSlot& s = grad_slots_[b.grad_slot];
  if (bf16) {
    backend().to_lowp(DType::bf16, s.data_lp, s.data, b.padded);
    s.work = b.comm->reduce_scatter(s.data_lp, s.reduced_lp, b.slice, DType::bf16, ReduceOp::avg);
  } else {
    s.work = b.comm->reduce_scatter(s.data, s.reduced, b.slice, DType::f32, ReduceOp::avg);
  }
  // The slot stays staged until its reduction is retired; the bucket's next micro-batch gets a
  // fresh slot (begin_grads), so it never accumulates into memory a reduction is reading.
  const int slot = b.grad_slot;
  b.grad_slot = -1;
  grads_in_flight_.push_back(slot);
  if (!opt_.overlap) retire_grad_slot(slot);
}

void DataParallel::retire_grad_slot(int slot) {
  GradSlot& s = grad_slots_[slot];
  s.work->wait();
  Bucket& b = buckets_[s.bucket];
  if (opt_.reduce_dtype == DType::bf16)
    backend().from_lowp(DType::bf16, s.reduced, s.reduced_lp, b.slice);
  backend().add_inplace(shard_grads_ + b.local, s.reduced, b.slice);  // accumulate micro-batches
  s.bucket = -1;
  s.work.reset();
  grads_in_flight_.erase(std::find(grads_in_flight_.begin(), grads_in_flight_.end(), slot));
}

int DataParallel::free_grad_slot() {
  for (int i = 0; i < static_cast<int>(grad_slots_.size()); ++i)
    if (grad_slots_[i].bucket < 0) return i;
  STRATA_CHECK(!grads_in_flight_.empty(), "DataParallel: no gradient staging slot can be freed");
  const int oldest = grads_in_flight_.front();
  retire_grad_slot(oldest);
  return oldest;
}

void DataParallel::begin_grads(int group) {
  if (opt_.zero < 2) return;  // resident gradients, zeroed at begin_step
  const int k = bucket_of_group_[group];
  if (k < 0) return;
  Bucket& b = buckets_[k];
  if (b.grad_slot >= 0) return;
  const int slot = free_grad_slot();
  GradSlot& s = grad_slots_[slot];
  s.bucket = k;
  b.grad_slot = slot;
  backend().zero(s.data, static_cast<size_t>(b.padded) * sizeof(float));
  for (int g : b.groups)
    params_->bind_group(g, nullptr, s.data + (params_->group_offset(g) - b.start));
}

void DataParallel::end_grads(int group) {
  const int k = bucket_of_group_[group];
  if (k < 0) return;
  Bucket& b = buckets_[k];
  if (opt_.zero < 2 && !last_micro_batch_) return;
  if (--b.remaining > 0) return;
  // Stages 0/1 reduce once, after the last micro-batch (without overlap: all of it after
  // backward, in finish_gradients); stages 2/3 every micro-batch, since the full gradients exist
  // only while their bucket is staged.
  if (opt_.zero >= 2 || (last_micro_batch_ && opt_.overlap)) launch_bucket(k);
}

void DataParallel::finish_gradients() {
  const TraceSpan span("dp grad sync", "comm_wait");
  if (opt_.zero < 2 && !opt_.overlap)
    for (int k = 0; k < static_cast<int>(buckets_.size()); ++k) launch_bucket(k);
  for (const WorkHandle& w : pending_) w->wait();
  if (opt_.reduce_dtype == DType::bf16)
    for (int k : pending_buckets_)
      backend().from_lowp(DType::bf16, params_->grads() + buckets_[k].start,
                          reduce_lp_ + buckets_[k].start, buckets_[k].padded);
  pending_.clear();
  pending_buckets_.clear();
  while (!grads_in_flight_.empty()) retire_grad_slot(grads_in_flight_.front());
}

double DataParallel::grad_norm() {
  if (opt_.zero < 2) return std::sqrt(backend().sum_squares(params_->grads(), params_->size()));
  float local = static_cast<float>(backend().sum_squares(shard_grads_, shard_size_));
  comm_.all_reduce(&local, 1, DType::f32, ReduceOp::sum)->wait();
  return std::sqrt(static_cast<double>(local));
}

std::vector<GradSpan> DataParallel::grad_spans(int index) const {
  const ParamInfo& p = params_->info(index);
  if (opt_.zero < 2) return {{params_->grads() + p.offset, 0, p.numel}};
  std::vector<GradSpan> out;
  for (const Bucket& b : buckets_)
    if (const OwnedRun r = owned_run(b, p); r.count > 0)
      out.push_back({shard_grads_ + r.shard_offset, r.begin, r.count});
  return out;
}

std::vector<DataParallel::ShardRun> DataParallel::shard_runs(int index) const {
  const ParamInfo& p = params_->info(index);
  std::vector<ShardRun> out;
  for (const Bucket& b : buckets_)
    if (const OwnedRun r = owned_run(b, p); r.count > 0)
      out.push_back({r.shard_offset, r.begin, r.count});
  return out;
}

std::vector<OptimSegment> DataParallel::optimizer_segments() const {
  if (opt_.zero == 0) return segments_for_all(*params_);
  std::vector<OptimSegment> out;
  for (const Bucket& b : buckets_) {
    for (const ParamInfo& p : params_->all()) {
      const OwnedRun r = owned_run(b, p);
      if (r.count == 0) continue;
      const int64_t flat = p.offset + r.begin;
      OptimSegment s;
      s.count = r.count;
      s.weight_decay = p.weight_decay;
      s.state_offset = r.shard_offset;
      s.param = opt_.zero >= 3 ? shard_params_ + s.state_offset : params_->data() + flat;
      s.grad = opt_.zero >= 2 ? shard_grads_ + s.state_offset : params_->grads() + flat;
      out.push_back(s);
    }
  }
  return out;
}

int64_t DataParallel::optimizer_state_size() const {
  return opt_.zero == 0 ? params_->size() : shard_size_;
}

void DataParallel::after_optimizer_step() {
  if (opt_.zero != 1 && opt_.zero != 2) return;
  const TraceSpan span("zero param all_gather", "comm_wait");
  std::vector<WorkHandle> works;
  for (const Bucket& b : buckets_) {
    float* base = params_->data() + b.start;
    works.push_back(b.comm->all_gather(base + b.rank * b.slice, base, b.slice, DType::f32));
  }
  wait_all(works);
}

// ---- stage 3: parameters on demand -------------------------------------------------------------

void DataParallel::bind_bucket_params(int k, float* base) {
  for (int g : buckets_[k].groups)
    params_->bind_group(g, base + (params_->group_offset(g) - buckets_[k].start), nullptr);
}

int DataParallel::param_slot_for(int k, bool prefetch) {
  Bucket& b = buckets_[k];
  if (b.param_slot >= 0) return b.param_slot;
  // Reuse the least recently used slot that nobody holds.
  int victim = -1;
  for (int i = 0; i < static_cast<int>(param_slots_.size()); ++i) {
    const ParamSlot& s = param_slots_[i];
    if (s.users > 0) continue;
    if (victim < 0 || s.bucket < 0 ||
        (param_slots_[victim].bucket >= 0 && s.last_use < param_slots_[victim].last_use))
      victim = i;
  }
  if (victim < 0) {
    STRATA_CHECK(prefetch, "DataParallel: every parameter staging slot is in use");
    return -1;
  }
  ParamSlot& s = param_slots_[victim];
  if (s.work) s.work->wait();
  if (s.bucket >= 0) buckets_[s.bucket].param_slot = -1;
  s.bucket = k;
  s.last_use = ++clock_;
  b.param_slot = victim;
  s.work = b.comm->all_gather(shard_params_ + b.local, s.data, b.slice, DType::f32);
  return victim;
}

void DataParallel::acquire_params(int group) {
  if (opt_.zero < 3) return;
  const int k = bucket_of_group_[group];
  if (k < 0) return;
  const int slot = param_slot_for(k, /*prefetch=*/false);
  ParamSlot& s = param_slots_[slot];
  s.users++;
  s.last_use = ++clock_;
  if (s.work) {
    s.work->wait();
    s.work.reset();
  }
  bind_bucket_params(k, s.data);
  // Prefetch the bucket the traversal reaches next: forward walks groups upwards, which is
  // towards bucket 0; backward walks towards the last bucket.
  const int next = backward_ ? k + 1 : k - 1;
  if (next >= 0 && next < static_cast<int>(buckets_.size()))
    param_slot_for(next, /*prefetch=*/true);
}

void DataParallel::release_params(int group) {
  if (opt_.zero < 3 || bucket_of_group_[group] < 0) return;
  const int slot = buckets_[bucket_of_group_[group]].param_slot;
  if (slot >= 0 && param_slots_[slot].users > 0) param_slots_[slot].users--;
}

// ---- checkpoints -------------------------------------------------------------------------------

void DataParallel::gather_to_full(const float* local_shard, float* full) {
  std::vector<WorkHandle> works;
  for (const Bucket& b : buckets_)
    works.push_back(b.comm->all_gather(local_shard + b.local, full + b.start, b.slice, DType::f32));
  wait_all(works);
}

void DataParallel::scatter_from_full(const float* full, float* local_shard) const {
  for (const Bucket& b : buckets_)
    backend().copy_from_host(local_shard + b.local, full + owned_begin(b),
                             static_cast<size_t>(b.slice) * sizeof(float));
}

}  // namespace strata
