// Trainer: the step loop of one rank. Builds the model, optimizer and data from a RunConfig,
// resumes from the latest checkpoint, trains with periodic evaluation and checkpoints, writes
// metrics.jsonl and a plain log in the run directory, and samples from the model at the end.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/arena.h"
#include "run/run_plan.h"
#include "train/anomaly.h"
#include "train/async_checkpoint.h"
#include "train/checkpoint.h"
#include "train/profiler.h"

namespace strata {

// Declared, not included: what the trainer holds by pointer or names in a declaration only (the
// trainer's .cc files include them), so that including trainer.h does not bring in every layer.
class Backend;
class ConsoleProgress;
class DataParallel;
class Decoder;
class HostOffloadGradHooks;
class LossScaler;
class MetricsSink;
class ModelParallel;
class Optimizer;
class PipelineExecutor;
class ProcessGroups;
class TokenSource;
class TrainDevice;
struct DataParallelOptions;
struct OptimSegment;
struct RecomputePolicy;

struct StepResult {
  int64_t step = 0;  // 1-based: the number of optimizer steps completed
  double loss = 0, grad_norm = 0, lr = 0, seconds = 0;
  // Where the step's time went: loading batches, forward + backward (communication that overlaps
  // it is hidden there), waiting for gradient reductions after backward (exposed communication),
  // and the optimizer (norm, clip, AdamW, ZeRO parameter all-gather).
  double data_s = 0, compute_s = 0, comm_exposed_s = 0, optimizer_s = 0;
  // Pipeline parallelism: time this rank spent waiting on transfers inside the schedule (bubble
  // plus exposed point-to-point time), and the idle fraction of the schedule averaged over the
  // pp ranks, next to the formula's value for this schedule.
  double bubble_s = 0, bubble_fraction = 0, bubble_formula = 0;
  // Tensor-parallel collectives sit inside forward and backward and are waited for at once:
  // their wait is taken out of compute_s and reported here (exposed communication).
  double tp_comm_s = 0;
  double ep_comm_s = 0;  // exposed waits of the MoE token exchange (ep > 1)
  // Context parallelism (cp > 1): exposed waits of the ring's send/recv or Ulysses' all-to-alls,
  // and the time those transfers were in flight (issue to completion): the ring hides the
  // difference behind the block computation.
  double cp_comm_s = 0, cp_flight_s = 0;
  // MoE families (model/moe_ffn.h), over the step's global batch (Trainer::record_moe): the
  // balancing losses (each times its coefficient, summed over layers, mean over micro-batches and
  // data-parallel ranks; not part of `loss`), assignments dropped over capacity and assignments
  // per expert of each layer (summed over micro-batches and ranks).
  double moe_aux_loss = 0, moe_z_loss = 0;
  int64_t moe_dropped = 0;
  std::vector<std::vector<int64_t>> moe_tokens_per_expert;
  // The same per layer (balancing losses mean over micro-batches, dropped summed).
  struct MoeLayer {
    double aux_loss = 0, z_loss = 0;
    int64_t dropped = 0;
  };
  std::vector<MoeLayer> moe_layers;
  std::vector<int64_t> router_collapsed;  // MoE layers whose collapse was found this step
  // fp16: the loss scale this step ran with, and whether its gradients overflowed (then the
  // update was skipped and the scale backed off).
  double loss_scale = 1;
  bool skipped = false;
  // Detectors (anomaly.h): the update was skipped for a non-finite loss or gradient norm, or for
  // a loss spike; the ranks named as stragglers this step; ranks whose parameters disagree.
  bool nonfinite = false, loss_spike = false;
  bool rolled_back = false;    // the run went back to its last checkpoint after this step
  bool skipped_batch = false;  // this step first consumed the batch a rollback ruled out
  double loss_zscore = 0;
  std::vector<int> stragglers, diverged;
  std::vector<int> slow_links;  // ranks a link probe found behind a slow link this step
};

class Trainer {
 public:
  // One rank of a job whose process groups are given, or (groups == nullptr) a process that runs
  // alone, which holds one-rank groups of its own (ProcessGroups::single) and takes the same path.
  // `backend`: run on it instead of system.device's (tests: a CPU backend whose memory the host
  // cannot touch, proving that the trainer reads device buffers only through the backend).
  // The plan comes from resolve_run_plan (run/run_plan.h); given a config, the trainer resolves
  // it for the groups' world (or one process).
  explicit Trainer(RunPlan plan, ProcessGroups* groups = nullptr, Backend* backend = nullptr);
  explicit Trainer(const RunConfig& config, ProcessGroups* groups = nullptr,
                   Backend* backend = nullptr);
  ~Trainer();

  // The whole job: train to train.steps, evaluate, checkpoint, sample. Returns the final
  // validation loss (NaN when there is no validation data).
  double run();

  // Pieces, for tests and tools.
  StepResult train_step();
  double evaluate();
  // Saves a checkpoint and waits until it is committed; returns its directory (collective).
  std::string save();
  // Starts a save: snapshot and background write with train.async_checkpoint, else the write
  // itself. poll_checkpoint commits it once every rank's file is complete (collective; `wait`
  // blocks until then) and returns the committed directory ("" while it is not, or failed).
  void begin_save();
  std::string poll_checkpoint(bool wait);
  Decoder& model() { return *model_; }
  DataParallel* data_parallel() { return dp_.get(); }
  ModelParallel* model_parallel() { return mp_.get(); }
  // Every parameter as a global tensor, in the single-process layout (collective; the result is
  // complete on world rank 0 only).
  std::vector<float> global_params();
  // The last step's gradients as every reduction (dp, ZeRO, tp, pp) left them, as global tensors
  // in the same layout, before clipping (fp16: still times the loss scale). Collective; complete
  // on world rank 0 only. The layout-equivalence tests compare them with one process to see the
  // gradient scale, which clipping and AdamW hide from the losses and parameters.
  std::vector<float> global_grads();
  Arena& arena() { return arena_; }
  int64_t step() const { return step_; }
  const RunConfig& config() const { return config_; }
  const RunPlan& plan() const { return plan_; }
  // Validation cross-entropy under train-split token frequencies (0 without validation data).
  double unigram_baseline() const { return unigram_baseline_; }

 private:
  void prepare_data();
  // Micro-batch `mb` of the held ones from `source`: inputs_/targets_ (this rank's rows) and,
  // under document masking, doc_starts_. The doc starts of micro-batch mb (null without them).
  void draw(TokenSource& source, int64_t mb);
  const int32_t* doc_starts(int64_t mb) const;
  void resume();
  // Loads `newest` (or, when it is damaged, the next older committed checkpoint) and continues
  // from it: parameters, optimizer, step, loss scaler, data position.
  void restore(const std::string& newest);
  // Goes back to the newest committed checkpoint (anomaly.spike_action = "rollback"); false when
  // there is none.
  bool rollback();
  // Loads the checkpoint in `dir` into this rank's buffers (whatever layout saved it); throws
  // CheckpointCorrupt naming a damaged file.
  void load_checkpoint(const std::string& dir);
  // The slices this rank saves; read_offloaded = false reads neither offloaded nor device state
  // (sizes only).
  std::vector<SliceSource> checkpoint_sources(bool read_offloaded = true);
  CheckpointState checkpoint_state() const;
  // The parameters (or this rank's ZeRO shard of them) and AdamW's moments as host arrays for a
  // checkpoint: the live buffers on the CPU; on a GPU, copies in device_snapshot_ (downloaded
  // unless `download` is false: sizes only), which upload_state writes back after a load.
  struct HostState {
    float *params = nullptr, *m = nullptr, *v = nullptr;  // host arrays
    float *device_params = nullptr, *device_m = nullptr, *device_v = nullptr;
    int64_t np = 0, ns = 0;  // elements of params, and of each moment
  };
  HostState host_state(bool download = true);
  void upload_state(const HostState& s);
  void write_metrics(const StepResult& r, double tokens_per_s, double mfu, double val_loss);
  // The step's MoE statistics, over the micro-batches and the ranks (collective).
  void record_moe(StepResult& r, int64_t micro_batches);
  // DeepSeek-V3's auxiliary-loss-free balancing after an update (model.moe.bias_update_rate):
  // each router bias moves towards the step's balance.
  void update_router_bias(const StepResult& r);
  void sample_at_end();
  bool is_rank0() const { return rank_ == 0; }
  double mean_over_dp(double value);
  // Full local-layout copies of sharded buffers (collective over dp when sharded).
  std::vector<float> local_full(const float* local_or_shard, bool sharded);
  // Global tensors of a full local-layout buffer: on world rank 0 (collective under tp/pp).
  std::vector<float> to_global(const std::vector<float>& local_full);
  void build_model();
  void make_optimizer(std::vector<OptimSegment> segments, int64_t state_size);
  // optim.offload = "cpu" (trainer_offload.cc).
  void make_host_offload(std::vector<OptimSegment> segments, int64_t state_size);
  bool attach_bf16_copy(std::vector<OptimSegment>& segments);
  int64_t optimizer_steps() const;
  void heartbeat(const char* phase);
  // Fault injection ([fault]) and the detectors ([anomaly]); trainer_anomaly.cc.
  void inject_start_faults();  // crash / hang at the start of a step
  void inject_slowness();      // inside the compute region
  void inject_gradient_faults();
  // Decides whether the update of a step with this loss and norm is applied; counts and reports
  // non-finite steps (aborting after anomaly.max_nonfinite in a row) and loss spikes.
  bool accept_update(double loss, double grad_norm, StepResult& r);
  void after_step_checks(StepResult& r);  // stragglers, replica divergence, injected damage
  // Slow links: a link probe (comm/link_probe.h) when the world's communication wait jumped
  // (`slowdown`) or anomaly.link_probe_every says so; names the ranks and hosts behind a slow
  // link, with their compute times beside (step_times_), which say it is not compute.
  void check_links(StepResult& r, bool slowdown);
  void event(const std::string& kind, nlohmann::json details = nlohmann::json::object());
  void corrupt_for_test(const std::string& dir);  // fault.corrupt_step
  // A communication timeout names the silent rank: the one of the group that has not timed out
  // in the same operation shortly after (heartbeat phases, comm.h TimeoutHint).
  void install_timeout_hint();

  RunPlan plan_;
  const RunConfig& config_ = plan_.config;
  std::unique_ptr<ProcessGroups> own_groups_;  // a process that runs alone: one-rank groups
  ProcessGroups* groups_ = nullptr;            // never null: the job's groups or own_groups_
  int rank_ = 0, world_ = 1;
  std::unique_ptr<TrainDevice> device_;  // system.device: the model's backend (and NCCL routes)
  Arena arena_;                          // the model's buffers, on the device
  Arena host_arena_;                     // host buffers of the step loop (token batches)
  std::string data_dir_, tokenizer_path_;
  std::unique_ptr<Decoder> model_;
  std::unique_ptr<DataParallel> dp_;        // every run (one rank: no reductions)
  std::unique_ptr<ModelParallel> mp_;       // tp > 1 or pp > 1
  std::unique_ptr<PipelineExecutor> pipe_;  // pp > 1
  int64_t micro_batches_ = 1;               // per optimizer step and dp rank
  std::unique_ptr<LossScaler> scaler_;      // fp16
  // AdamW, or with optim.offload = "nvme" or "cpu" its master weights and moments in files or
  // host memory (optim/optimizer.h: one interface for the step and the checkpoints)
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<HostOffloadGradHooks> offload_hooks_;  // "cpu", world of one: early downloads
  std::unique_ptr<TokenSource> train_data_, val_data_;
  int32_t* inputs_ = nullptr;  // [held micro-batches, batch x this rank's rows per sequence]
  int32_t* targets_ = nullptr;
  // Context parallelism and document masking: what the loader gives (whole sequences), cut into
  // this rank's rows by draw(); the document starts of every held micro-batch [held, b x t].
  int32_t* whole_inputs_ = nullptr;
  int32_t* whole_targets_ = nullptr;
  int32_t* doc_starts_ = nullptr;
  int32_t eos_id_ = -1;  // data.document_mask: the end-of-document token
  int64_t step_ = 0;
  double peak_flops_ = 0;
  double unigram_baseline_ = 0;
  AsyncCheckpointWriter ckpt_writer_;
  std::optional<CheckpointState> pending_save_;       // started, not yet committed
  std::optional<CheckpointWriteResult> ckpt_result_;  // this rank's write, once finished
  std::vector<float> offload_snapshot_;               // master, m, v read back from the files
  std::vector<float> device_snapshot_;                // params, m, v downloaded from a GPU
  nlohmann::json last_checkpoint_;                    // the latest commit, for the next metrics
  nlohmann::json lineage_;  // the checkpoint this run resumed from, and its ancestors (rank 0)
  std::unique_ptr<LossSpikeDetector> spikes_;
  std::unique_ptr<RouterCollapseDetector> router_collapse_;
  int64_t nonfinite_run_ = 0;      // consecutive non-finite steps
  int64_t launch_attempt_ = 1;     // STRATA_LAUNCH_ATTEMPT (1 outside `strata launch`)
  std::vector<float> step_times_;  // per world rank: compute and wait seconds, gathered each step
  std::unique_ptr<CommSlowdownDetector> comm_slowdown_;  // made at the first step checked
  bool spike_injected_ = false;                          // fault.spike_step fires once per process
  bool optimizer_writes_bf16_ = false;  // AdamW keeps the bf16 working weights current
  bool rollback_requested_ = false;     // a loss spike asked to go back to the last checkpoint
  std::vector<int64_t> skip_batch_at_;  // steps whose batch is consumed untrained (rolled back)
  // metrics.jsonl, TensorBoard event files and MLflow (outputs on rank 0 only)
  std::unique_ptr<MetricsSink> metrics_;
  std::unique_ptr<ConsoleProgress> console_;
  StepProfiler profiler_;  // [profile]: the tracer's window of steps
};

}  // namespace strata
