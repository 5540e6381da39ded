// The progress engine: ONE thread per process, shared by every group, that issues the MPI
// nonblocking calls and drives them to completion.
//
// Why a thread: Open MPI makes no progress in the background. A nonblocking collective only
// advances inside MPI calls (each libnbc round, each rendezvous of the shared-memory transport),
// and the training thread is busy computing, so someone else must keep calling MPI_Testsome.
// Why one: collectives must be started in the same order on every rank of a communicator. Callers
// submit in the same order on every rank and this thread issues FIFO, so the order holds across
// groups and caller threads; a single poller also keeps MPI's internal locks uncontended.
//
// Completion is reported in issue order within a group: a Work completes only after every Work
// its group issued before it, so waiting on the last of several implies all of them (the order
// data-parallel bucketing relies on). Different groups complete independently.
//
// Polling: blocks on the queue when nothing is in flight (no CPU when idle). While a caller is
// blocked in wait(), nothing on this rank computes, so the engine polls hard (MPI_Testsome, then
// sched_yield so that an oversubscribed core still turns over). While operations are in flight
// and nobody waits, the caller is computing and the PollPolicy decides how much CPU polling may
// take from it; see docs/COMM.md for the measurements behind the default.
#pragma once
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace strata::comm {

class PendingOp;

struct PollPolicy {
  enum class Mode : uint8_t {
    spin,      // MPI_Testsome back to back: lowest latency, steals a core
    yield,     // sched_yield() between polls
    sleep,     // sleep sleep_us between polls (woken early by a submission or a waiter)
    adaptive,  // spin for spin_us after any progress, then sleep sleep_us between polls
  };
  // The policies above apply while nobody waits; with a caller blocked in wait(), every policy
  // but spin polls with sched_yield.
  Mode mode = Mode::adaptive;
  double spin_us = 20;
  double sleep_us = 50;

  std::string describe() const;  // the text parse() reads back
  // "spin", "yield", "sleep:<us>", "adaptive:<spin_us>:<sleep_us>"; the STRATA_COMM_POLL
  // environment variable sets the process default.
  static PollPolicy parse(std::string_view text);
};

class ProgressEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // The process's engine; its thread starts on first use.
  static ProgressEngine& get();
  // Joins the thread (mpi_finalize). Operations still in flight are abandoned (their waiters get
  // an error); returns how many.
  static int shutdown();

  void submit(std::shared_ptr<PendingOp> op);
  // Blocks until op completes (true) or the deadline passes (false).
  bool wait_done(const PendingOp& op, Clock::time_point deadline);
  // The earliest incomplete operation issued before op on op's group, described; "" if none.
  std::string earliest_pending(const PendingOp& op);

  void set_poll_policy(const PollPolicy& policy);
  PollPolicy poll_policy();

  ~ProgressEngine();

 private:
  ProgressEngine();
  void run();
  void issue_new(std::vector<std::shared_ptr<PendingOp>>& incoming);
  bool test_in_flight();
  void retire_in_order();

  std::mutex mutex_;
  std::condition_variable queue_cv_;  // the engine waits here for submissions
  std::condition_variable done_cv_;   // callers wait here for completions
  std::vector<std::shared_ptr<PendingOp>> queue_;
  bool stop_ = false;
  int waiters_ = 0;    // callers blocked in wait_done (under mutex_)
  int abandoned_ = 0;  // operations unfinished at shutdown
  PollPolicy policy_;

  // In flight, in issue order; requests_[i] belongs to in_flight_[i]. Changed by the engine's
  // thread under mutex_ (so that earliest_pending can read it); MPI_Testsome runs outside it.
  std::vector<std::shared_ptr<PendingOp>> in_flight_;
  std::vector<MPI_Request> requests_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  std::vector<const void*> blocked_groups_;  // retire_in_order's scratch

  std::thread thread_;
};

}  // namespace strata::comm
