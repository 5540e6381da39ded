// ZeRO-Infinity-style optimizer-state offload to disk ("NVMe offload"): AdamW whose f32 master
// weights and both Adam moments live in files instead of memory, so that the optimizer state of
// a model (12 bytes per parameter, the largest part of its memory) costs only a few chunk buffers.
// Each step streams the state through those buffers: a background I/O thread reads chunk k+1 and
// writes chunk k-1 back while the caller's thread updates chunk k, so that the disk and the
// update overlap and the step is bound by whichever is slower.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "optim/adamw.h"
#include "optim/optim_config.h"
#include "optim/state_offload.h"

namespace strata {

struct OffloadOptions {
  std::string dir;                            // directory for the state files (created if missing)
  int64_t chunk_elements = int64_t{1} << 20;  // elements per streamed chunk
  int buffers = 3;  // chunks in flight: one being updated, one read ahead, one being written back
};

// AdamW whose f32 master weights and both Adam moments live in three files under options.dir
// (master.bin, exp_avg.bin, exp_avg_sq.bin: state_size f32 each, laid out by state_offset like
// AdamW's moments), streamed through `buffers` preallocated chunk buffers by a background I/O
// thread. Resident memory for the categories "master" and "optimizer" is only the chunk buffers
// (3 arrays x buffers x chunk elements floats), as the arena reports. The segments' param buffers
// stay the working copy the model reads; every step refreshes them from the updated master values.
//
// The directory holds one optimizer's state: the files are locked while the instance lives, and a
// second instance on the same directory (two ranks given the same path) is an error. The files are
// scratch space, not a checkpoint: they are truncated at construction, and a run resumes through
// read_state/write_state. After an I/O error in step() the state on disk is partly updated and
// must be restored from a checkpoint.
class OffloadedAdamW final : public OffloadedOptimizer {
 public:
  OffloadedAdamW(std::vector<OptimSegment> segments, int64_t state_size, Arena& arena,
                 const OptimConfig& config, const OffloadOptions& options);
  ~OffloadedAdamW() override;  // joins the I/O thread
  // Chunk elements and buffers the constructor uses for a state of state_size elements (a chunk
  // larger than the state, or more buffers than chunks, would only waste memory). Each of the
  // three arrays (master, exp_avg, exp_avg_sq) holds chunk_elements * buffers floats.
  struct Buffering {
    int64_t chunk_elements = 1, num_chunks = 0;
    int buffers = 1;
  };
  static Buffering buffering(int64_t state_size, const OffloadOptions& options);
  OffloadedAdamW(const OffloadedAdamW&) = delete;
  OffloadedAdamW& operator=(const OffloadedAdamW&) = delete;

  // Writes the current values of the segment params into the master file and zeros the moments
  // (call once after the params are initialised).
  void init_from_params();
  // One AdamW update, bitwise equal to AdamW::step on the same inputs: the same kernel runs on
  // the same elements, with the master value read from the file in place of the param (they are
  // equal: the param is refreshed from the master after every update). Allocates nothing.
  void step(float lr, float grad_scale) override;

  int64_t steps_taken() const override { return step_; }
  void set_steps_taken(int64_t step) override { step_ = step; }
  int64_t state_size() const override { return state_size_; }

  // Checkpoints (OffloadedOptimizer): read from and written to the files.
  void read_state(float* master, float* exp_avg, float* exp_avg_sq) const override;
  void write_state(const float* master, const float* exp_avg, const float* exp_avg_sq) override;

  // Seconds of the last step the updating thread spent waiting for I/O (the exposed part), and
  // the bytes it read and wrote.
  double last_io_wait_s() const { return last_io_wait_s_; }
  int64_t last_io_bytes() const { return last_io_bytes_; }

  const std::string& dir() const { return dir_; }

 private:
  enum class IoKind : uint8_t { read, write };
  struct IoRequest {
    IoKind kind = IoKind::read;
    int64_t chunk = 0;
    int slot = 0;
  };

  int64_t chunk_begin(int64_t chunk) const { return chunk * chunk_elements_; }
  int64_t chunk_count(int64_t chunk) const;
  // Queues a request for the I/O thread and returns its ticket (requests complete in order).
  int64_t submit(IoKind kind, int64_t chunk, int slot);
  // Blocks until the request with `ticket` (and every earlier one) has completed; after an I/O
  // error, drains the queue and throws the first error.
  void wait_for(int64_t ticket);
  void io_loop();
  // Reads or writes one chunk of all three files; returns an error message or "".
  std::string do_io(const IoRequest& request);
  // Applies the update to the chunk in `slot` and copies the new master values into the params;
  // `cursor` walks the sorted segments forward across the chunks of one pass.
  void update_chunk(int64_t chunk, int slot, size_t& cursor, float lr, float grad_scale);
  void open_files();
  void close_files() noexcept;

  std::vector<OptimSegment> segments_;  // sorted by state_offset
  int64_t state_size_;
  OptimConfig config_;
  std::string dir_;
  int64_t chunk_elements_;  // capped to the state size
  int64_t num_chunks_;
  int buffers_;
  int64_t step_ = 0;

  // Chunk buffers: [slot * chunk_elements_, ...) of each array; master/m/v per slot.
  float* master_buf_ = nullptr;
  float* m_buf_ = nullptr;
  float* v_buf_ = nullptr;

  std::string paths_[3];
  int fds_[3] = {-1, -1, -1};

  // The I/O thread and its queue: a fixed ring, so that submitting allocates nothing.
  std::vector<IoRequest> ring_;
  std::vector<int64_t> slot_ticket_;  // per slot: the ticket of the read that fills it
  int64_t issued_ = 0;                // tickets handed out (guarded by mutex_)
  int64_t completed_ = 0;             // tickets completed, in order (guarded by mutex_)
  std::string error_;  // the first I/O error since the last finish_step (guarded by mutex_)
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // the I/O thread waits for requests
  std::condition_variable done_cv_;  // the updating thread waits for completions / ring space
  std::thread io_thread_;

  double step_wait_s_ = 0.0;  // accumulated by the updating thread during step()
  double last_io_wait_s_ = 0.0;
  int64_t last_io_bytes_ = 0;
};

}  // namespace strata
