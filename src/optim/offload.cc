#include "optim/offload.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/trace.h"
#include "io/fd.h"
#include "kernels/cpu/kernels.h"

namespace strata {

namespace {

constexpr const char* kFileNames[3] = {"master.bin", "exp_avg.bin", "exp_avg_sq.bin"};
// What to do about a failed write: a full disk (or a file-size limit) needs space, anything
// else needs a look at the disk.
std::string write_advice(int err, const std::string& dir, int64_t state_size) {
  if (err == ENOSPC || err == EFBIG || err == EDQUOT)
    return cat("the disk holding '", dir, "' is full or the file is over a size limit: free space",
               " or point the optimizer offload directory at a disk with at least ",
               3 * state_size * int64_t{sizeof(float)}, " bytes free");
  return cat("check that '", dir, "' is a writable directory on a working local disk");
}

std::string read_error(const std::string& path, int err, uint64_t offset, size_t bytes) {
  if (err < 0)
    return cat("optimizer offload: '", path, "' ends before byte ", offset + bytes,
               ": the file was truncated or replaced while the optimizer used it; do not let",
               " other processes use the offload directory, and resume from a checkpoint");
  return cat("optimizer offload: cannot read ", bytes, " bytes at byte ", offset, " of '", path,
             "': ", io::errno_text(err), "; check the disk, then resume from a checkpoint");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

OffloadedAdamW::Buffering OffloadedAdamW::buffering(int64_t state_size,
                                                    const OffloadOptions& options) {
  // A chunk larger than the state, or more buffers than chunks, would only waste memory.
  Buffering b;
  b.chunk_elements = std::max<int64_t>(1, std::min(options.chunk_elements, state_size));
  b.num_chunks = (state_size + b.chunk_elements - 1) / b.chunk_elements;
  b.buffers =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(options.buffers, b.num_chunks)));
  return b;
}

OffloadedAdamW::OffloadedAdamW(std::vector<OptimSegment> segments, int64_t state_size, Arena& arena,
                               const OptimConfig& config, const OffloadOptions& options)
    : segments_(std::move(segments)), state_size_(state_size), config_(config), dir_(options.dir) {
  STRATA_CHECK(!dir_.empty(),
               "optimizer offload: no directory given; set the offload directory to a path on a "
               "fast local disk");
  STRATA_CHECK(options.chunk_elements > 0, "optimizer offload: chunk_elements is ",
               options.chunk_elements, "; it must be at least 1 (default 1M elements)");
  STRATA_CHECK(options.buffers >= 1, "optimizer offload: buffers is ", options.buffers,
               "; it must be at least 1 (3 overlaps reading, updating and writing)");
  STRATA_CHECK(state_size_ >= 0, "optimizer offload: negative state size ", state_size_);

  sort_and_check_segments(segments_, state_size_, "optimizer offload");

  const Buffering buffering_plan = buffering(state_size_, options);
  chunk_elements_ = buffering_plan.chunk_elements;
  num_chunks_ = buffering_plan.num_chunks;
  buffers_ = buffering_plan.buffers;
  const int64_t buffer_elements = chunk_elements_ * buffers_;
  master_buf_ = arena.alloc<float>(MemCategory::master, buffer_elements, "offload master chunks");
  m_buf_ = arena.alloc<float>(MemCategory::optimizer, buffer_elements, "offload exp_avg chunks");
  v_buf_ = arena.alloc<float>(MemCategory::optimizer, buffer_elements, "offload exp_avg_sq chunks");
  // Enough room for every request one step can have outstanding (a write and a read per slot),
  // so that submitting never waits for space in practice.
  ring_.resize(static_cast<size_t>(2 * buffers_ + 2));
  slot_ticket_.assign(static_cast<size_t>(buffers_), 0);

  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_, ec))
    fail("optimizer offload: cannot create the directory '", dir_,
         "': ", ec ? ec.message() : std::string("a file of that name is in the way"),
         "; set the offload directory to a writable path on a fast local disk");
  try {
    open_files();
    io_thread_ = std::thread([this] { io_loop(); });
  } catch (...) {
    close_files();
    throw;
  }
}

OffloadedAdamW::~OffloadedAdamW() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (io_thread_.joinable()) io_thread_.join();
  close_files();
}

void OffloadedAdamW::open_files() {
  const uint64_t bytes = static_cast<uint64_t>(state_size_) * sizeof(float);
  for (int i = 0; i < 3; ++i) {
    paths_[i] = (std::filesystem::path(dir_) / kFileNames[i]).string();
    // Not O_TRUNC: another live optimizer may own these files, which the lock below detects
    // before anything is changed.
    fds_[i] = ::open(paths_[i].c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fds_[i] < 0) {
      const int err = errno;
      fail("optimizer offload: cannot create '", paths_[i], "': ", io::errno_text(err), "; ",
           write_advice(err, dir_, state_size_));
    }
    if (i == 0 && ::flock(fds_[0], LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK)
        fail("optimizer offload: '", dir_, "' is in use by another optimizer (", paths_[0],
             " is locked); give each rank and each run its own offload directory");
      fail("optimizer offload: cannot lock '", paths_[0], "': ", io::errno_text(err),
           "; use a directory on a local disk");
    }
    // Truncate, then reserve the full size: the files start as zeros, and a disk too small for
    // the state fails here, naming the directory, instead of in the middle of a step.
    if (::ftruncate(fds_[i], 0) != 0) {
      const int err = errno;
      fail("optimizer offload: cannot truncate '", paths_[i], "': ", io::errno_text(err), "; ",
           write_advice(err, dir_, state_size_));
    }
    if (bytes == 0) continue;
    int err = ::posix_fallocate(fds_[i], 0, static_cast<off_t>(bytes));
    // Filesystems without fallocate: a sparse file of the full size (space is then taken, and a
    // full disk reported, by the writes).
    if (err == EOPNOTSUPP || err == EINVAL)
      err = ::ftruncate(fds_[i], static_cast<off_t>(bytes)) == 0 ? 0 : errno;
    if (err != 0)
      fail("optimizer offload: cannot reserve ", bytes, " bytes for '", paths_[i],
           "': ", io::errno_text(err), "; ", write_advice(err, dir_, state_size_));
  }
}

void OffloadedAdamW::close_files() noexcept {
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);  // closing the master file also releases the directory's lock
    fd = -1;
  }
}

int64_t OffloadedAdamW::chunk_count(int64_t chunk) const {
  return std::min(chunk_elements_, state_size_ - chunk_begin(chunk));
}

std::string OffloadedAdamW::do_io(const IoRequest& request) {
  const int64_t count = chunk_count(request.chunk);
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  const uint64_t offset = static_cast<uint64_t>(chunk_begin(request.chunk)) * sizeof(float);
  const int64_t at = request.slot * chunk_elements_;
  float* bufs[3] = {master_buf_ + at, m_buf_ + at, v_buf_ + at};
  TraceSpan span(request.kind == IoKind::read ? "offload read" : "offload write", "io",
                 request.chunk);
  span.arg("bytes", static_cast<int64_t>(3 * bytes));
  for (int i = 0; i < 3; ++i) {
    if (request.kind == IoKind::read) {
      const int err = io::pread_exact(fds_[i], bufs[i], bytes, offset);
      if (err != 0) return read_error(paths_[i], err, offset, bytes);
    } else {
      const int err = io::pwrite_all(fds_[i], bufs[i], bytes, offset);
      if (err != 0)
        return cat("optimizer offload: cannot write ", bytes, " bytes at byte ", offset, " of '",
                   paths_[i], "': ", io::errno_text(err), "; ",
                   write_advice(err, dir_, state_size_),
                   "; the optimizer state on disk is now partly updated: resume from a checkpoint");
    }
  }
  return {};
}

void OffloadedAdamW::io_loop() {
  trace::name_thread("offload io");
  const int64_t capacity = static_cast<int64_t>(ring_.size());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || completed_ < issued_; });
    if (completed_ == issued_) return;  // stop_, and nothing left to do
    const IoRequest request = ring_[static_cast<size_t>(completed_ % capacity)];
    // After a failure the rest of the step's requests complete without touching the files, so
    // that the updating thread can drain the queue and report the first error.
    const bool skip = !error_.empty();
    lock.unlock();
    std::string err = skip ? std::string() : do_io(request);
    lock.lock();
    if (!err.empty() && error_.empty()) error_ = std::move(err);
    ++completed_;
    done_cv_.notify_all();
  }
}

int64_t OffloadedAdamW::submit(IoKind kind, int64_t chunk, int slot) {
  const int64_t capacity = static_cast<int64_t>(ring_.size());
  int64_t ticket = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (issued_ - completed_ >= capacity) {
      const auto start = std::chrono::steady_clock::now();
      done_cv_.wait(lock, [&] { return issued_ - completed_ < capacity; });
      step_wait_s_ += seconds_since(start);
    }
    ring_[static_cast<size_t>(issued_ % capacity)] = IoRequest{kind, chunk, slot};
    ticket = ++issued_;
  }
  work_cv_.notify_one();
  return ticket;
}

void OffloadedAdamW::wait_for(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (completed_ < ticket) {
    const auto start = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return completed_ >= ticket || !error_.empty(); });
    step_wait_s_ += seconds_since(start);
  }
  if (error_.empty()) return;
  // Drain the rest (the I/O thread skips it) so that no request refers to a buffer any longer.
  done_cv_.wait(lock, [this] { return completed_ == issued_; });
  std::string message = std::move(error_);
  error_.clear();
  fail(message);
}

void OffloadedAdamW::update_chunk(int64_t chunk, int slot, size_t& cursor, float lr,
                                  float grad_scale) {
  const int64_t begin = chunk_begin(chunk), end = begin + chunk_count(chunk);
  const int64_t at = slot * chunk_elements_;
  float* master = master_buf_ + at;
  float* m = m_buf_ + at;
  float* v = v_buf_ + at;
  for_each_overlap(
      segments_, begin, end, cursor, [&](const OptimSegment& s, int64_t lo, int64_t hi) {
        const float wd = s.weight_decay ? config_.weight_decay : 0.0f;
        // The master value equals the working param (refreshed after every update), so this is
        // AdamW's in-place update of the same elements with the same kernel: bitwise equal.
        kernels::adamw_update(master + (lo - begin), s.grad + (lo - s.state_offset),
                              m + (lo - begin), v + (lo - begin), hi - lo, lr, config_.beta1,
                              config_.beta2, config_.eps, wd, grad_scale, step_);
        std::memcpy(s.param + (lo - s.state_offset), master + (lo - begin),
                    static_cast<size_t>(hi - lo) * sizeof(float));
      });
}

void OffloadedAdamW::step(float lr, float grad_scale) {
  const TraceSpan span("adamw (offloaded)", "optimizer");
  ++step_;
  step_wait_s_ = 0.0;
  // Prefetch one chunk per buffer; afterwards each slot's next read is queued right behind the
  // write of the chunk it held, and the queue keeps them in that order.
  const int64_t prefetch = std::min<int64_t>(buffers_, num_chunks_);
  for (int64_t k = 0; k < prefetch; ++k)
    slot_ticket_[static_cast<size_t>(k)] = submit(IoKind::read, k, static_cast<int>(k));
  size_t cursor = 0;
  for (int64_t k = 0; k < num_chunks_; ++k) {
    const int slot = static_cast<int>(k % buffers_);
    wait_for(slot_ticket_[static_cast<size_t>(slot)]);
    update_chunk(k, slot, cursor, lr, grad_scale);
    submit(IoKind::write, k, slot);
    if (k + buffers_ < num_chunks_)
      slot_ticket_[static_cast<size_t>(slot)] = submit(IoKind::read, k + buffers_, slot);
  }
  wait_for(issued_);
  last_io_wait_s_ = step_wait_s_;
  last_io_bytes_ = 2 * 3 * state_size_ * int64_t{sizeof(float)};
}

void OffloadedAdamW::init_from_params() {
  // Synchronous, through slot 0: runs once, and the I/O thread is idle between steps.
  float* bufs[3] = {master_buf_, m_buf_, v_buf_};
  size_t cursor = 0;
  for (int64_t k = 0; k < num_chunks_; ++k) {
    const int64_t begin = chunk_begin(k), count = chunk_count(k), end = begin + count;
    for (float* b : bufs) std::fill(b, b + count, 0.0f);  // padding gaps stay zero
    for_each_overlap(segments_, begin, end, cursor,
                     [&](const OptimSegment& s, int64_t lo, int64_t hi) {
                       std::memcpy(master_buf_ + (lo - begin), s.param + (lo - s.state_offset),
                                   static_cast<size_t>(hi - lo) * sizeof(float));
                     });
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    const uint64_t offset = static_cast<uint64_t>(begin) * sizeof(float);
    for (int i = 0; i < 3; ++i) {
      const int err = io::pwrite_all(fds_[i], bufs[i], bytes, offset);
      if (err != 0)
        fail("optimizer offload: cannot write '", paths_[i], "': ", io::errno_text(err), "; ",
             write_advice(err, dir_, state_size_));
    }
  }
  step_ = 0;
}

void OffloadedAdamW::read_state(float* master, float* exp_avg, float* exp_avg_sq) const {
  float* dst[3] = {master, exp_avg, exp_avg_sq};
  const size_t bytes = static_cast<size_t>(state_size_) * sizeof(float);
  for (int i = 0; i < 3; ++i) {
    const int err = io::pread_exact(fds_[i], dst[i], bytes, 0);
    if (err != 0) fail(read_error(paths_[i], err, 0, bytes));
  }
}

void OffloadedAdamW::write_state(const float* master, const float* exp_avg,
                                 const float* exp_avg_sq) {
  const float* src[3] = {master, exp_avg, exp_avg_sq};
  const size_t bytes = static_cast<size_t>(state_size_) * sizeof(float);
  for (int i = 0; i < 3; ++i) {
    const int err = io::pwrite_all(fds_[i], src[i], bytes, 0);
    if (err != 0)
      fail("optimizer offload: cannot write '", paths_[i], "': ", io::errno_text(err), "; ",
           write_advice(err, dir_, state_size_));
  }
  for (const OptimSegment& s : segments_)
    if (s.count > 0)
      std::memcpy(s.param, master + s.state_offset, static_cast<size_t>(s.count) * sizeof(float));
}

}  // namespace strata
