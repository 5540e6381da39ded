#include "comm/progress_engine.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "comm/mpi_types.h"
#include "comm/mpi_work.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"

namespace strata::comm {

namespace {
std::mutex g_engine_mutex;
std::unique_ptr<ProgressEngine> g_engine;

double parse_us(std::string_view text, std::string_view whole) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  STRATA_CHECK(!s.empty() && end == s.c_str() + s.size() && v >= 0 && v < 1e6, "comm poll policy '",
               whole, "': '", text, "' is not a time in microseconds");
  return v;
}
}  // namespace

std::string PollPolicy::describe() const {
  char buf[64];
  switch (mode) {
    case Mode::spin:
      return "spin";
    case Mode::yield:
      return "yield";
    case Mode::sleep:
      std::snprintf(buf, sizeof buf, "sleep:%g", sleep_us);
      return buf;
    case Mode::adaptive:
      std::snprintf(buf, sizeof buf, "adaptive:%g:%g", spin_us, sleep_us);
      return buf;
  }
  return "?";
}

PollPolicy PollPolicy::parse(std::string_view text) {
  PollPolicy p;
  const size_t colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  if (head == "spin" && rest.empty()) {
    p.mode = Mode::spin;
  } else if (head == "yield" && rest.empty()) {
    p.mode = Mode::yield;
  } else if (head == "sleep" && !rest.empty()) {
    p.mode = Mode::sleep;
    p.sleep_us = parse_us(rest, text);
  } else if (head == "adaptive") {
    p.mode = Mode::adaptive;
    if (!rest.empty()) {
      const size_t c2 = rest.find(':');
      STRATA_CHECK(c2 != std::string_view::npos, "comm poll policy '", text,
                   "': expected adaptive:<spin_us>:<sleep_us>");
      p.spin_us = parse_us(rest.substr(0, c2), text);
      p.sleep_us = parse_us(rest.substr(c2 + 1), text);
    }
  } else {
    fail("comm poll policy '", text,
         "' is not one of spin, yield, sleep:<us>, adaptive[:<spin_us>:<sleep_us>]");
  }
  return p;
}

ProgressEngine& ProgressEngine::get() {
  std::lock_guard<std::mutex> lock(g_engine_mutex);
  if (!g_engine) g_engine.reset(new ProgressEngine());
  return *g_engine;
}

int ProgressEngine::shutdown() {
  std::lock_guard<std::mutex> lock(g_engine_mutex);
  if (!g_engine) return 0;
  {
    std::lock_guard<std::mutex> engine_lock(g_engine->mutex_);
    g_engine->stop_ = true;
  }
  g_engine->queue_cv_.notify_all();
  if (g_engine->thread_.joinable()) g_engine->thread_.join();
  const int abandoned = g_engine->abandoned_;
  g_engine.reset();
  return abandoned;
}

ProgressEngine::ProgressEngine() {
  if (const char* env = std::getenv("STRATA_COMM_POLL")) policy_ = PollPolicy::parse(env);
  thread_ = std::thread([this] { run(); });
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressEngine::submit(std::shared_ptr<PendingOp> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    STRATA_CHECK(!stop_, "comm: ", op->describe(), " submitted after the progress engine stopped");
    queue_.push_back(std::move(op));
  }
  queue_cv_.notify_one();
}

bool ProgressEngine::wait_done(const PendingOp& op, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiters_;
  queue_cv_.notify_one();  // a sleeping engine switches to polling hard
  const bool done = done_cv_.wait_until(lock, deadline, [&] { return op.done(); });
  --waiters_;
  return done;
}

std::string ProgressEngine::earliest_pending(const PendingOp& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::shared_ptr<PendingOp>& other : in_flight_) {
    if (other.get() == &op) break;
    if (other->group() == op.group() && !other->done())
      return cat("an earlier ", comm_op_name(other->args().kind), " of ", other->args().bytes,
                 " bytes on the same group");
  }
  return "";
}

void ProgressEngine::set_poll_policy(const PollPolicy& policy) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    policy_ = policy;
  }
  queue_cv_.notify_one();
}

PollPolicy ProgressEngine::poll_policy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return policy_;
}

void ProgressEngine::run() {
  // Sleeps of tens of microseconds would otherwise stretch by the default 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  trace::name_thread("comm progress");
  std::vector<std::shared_ptr<PendingOp>> incoming;
  Clock::time_point last_progress = Clock::now();
  for (;;) {
    PollPolicy policy;
    bool waited_on = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (in_flight_.empty()) queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      incoming.swap(queue_);
      policy = policy_;
      waited_on = waiters_ > 0;
    }
    bool progress = !incoming.empty();
    issue_new(incoming);
    progress = test_in_flight() || progress;
    if (progress) {
      retire_in_order();
      last_progress = Clock::now();
    }
    if (in_flight_.empty()) continue;

    using Mode = PollPolicy::Mode;
    // A blocked caller means the communication is exposed: take the CPU (but yield it).
    const Mode mode = waited_on && policy.mode != Mode::spin ? Mode::yield : policy.mode;
    const auto since = std::chrono::duration<double, std::micro>(Clock::now() - last_progress);
    if (mode == Mode::yield) {
      sched_yield();
    } else if (mode == Mode::sleep || (mode == Mode::adaptive && since.count() >= policy.spin_us)) {
      // A submission or a new waiter wakes the engine early.
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait_for(lock, std::chrono::duration<double, std::micro>(policy.sleep_us),
                         [&] { return stop_ || !queue_.empty() || waiters_ > 0; });
    }
  }

  // Shut down with operations unfinished: MPI cannot cancel a collective, so the requests are
  // left to MPI_Finalize; their waiters get an error instead of a hang.
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_.insert(in_flight_.end(), queue_.begin(), queue_.end());
  queue_.clear();
  abandoned_ = static_cast<int>(in_flight_.size());
  if (!in_flight_.empty()) {
    log::error("comm: shutting down with ", in_flight_.size(), " operation(s) unfinished, first ",
               in_flight_.front()->describe());
    for (const std::shared_ptr<PendingOp>& op : in_flight_) {
      if (!op->mpi_done()) op->on_mpi_complete(MPI_ERR_PENDING);
      op->retire();
    }
    in_flight_.clear();
    requests_.clear();
  }
  done_cv_.notify_all();
}

void ProgressEngine::issue_new(std::vector<std::shared_ptr<PendingOp>>& incoming) {
  for (std::shared_ptr<PendingOp>& op : incoming) {
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_ERR_INTERN;
    try {
      rc = op->issue(&request);
    } catch (const std::exception& e) {
      log::error("comm: ", op->describe(), ": ", e.what());
    }
    if (rc != MPI_SUCCESS) {
      op->on_mpi_complete(rc);
      request = MPI_REQUEST_NULL;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.push_back(std::move(op));
    requests_.push_back(request);
  }
  incoming.clear();
}

bool ProgressEngine::test_in_flight() {
  const int n = static_cast<int>(requests_.size());
  if (n == 0) return false;
  indices_.resize(static_cast<size_t>(n));
  statuses_.resize(static_cast<size_t>(n));
  int outcount = 0;
  const int rc = MPI_Testsome(n, requests_.data(), &outcount, indices_.data(), statuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    // The call failed as a whole: test one by one to tell which operation the error belongs to.
    for (int i = 0; i < n; ++i) {
      MPI_Request& request = requests_[static_cast<size_t>(i)];
      if (request == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Status status;
      const int r = MPI_Test(&request, &flag, &status);
      if (r != MPI_SUCCESS || flag) {
        in_flight_[static_cast<size_t>(i)]->on_mpi_complete(r);
        request = MPI_REQUEST_NULL;
      }
    }
    return true;
  }
  if (outcount == MPI_UNDEFINED) return false;
  for (int k = 0; k < outcount; ++k) {
    const size_t i = static_cast<size_t>(indices_[static_cast<size_t>(k)]);
    const int err =
        rc == MPI_ERR_IN_STATUS ? statuses_[static_cast<size_t>(k)].MPI_ERROR : MPI_SUCCESS;
    in_flight_[i]->on_mpi_complete(err);
    requests_[i] = MPI_REQUEST_NULL;
  }
  return outcount > 0;
}

void ProgressEngine::retire_in_order() {
  bool retired = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<const void*>& blocked = blocked_groups_;  // groups with an earlier op running
    blocked.clear();
    size_t kept = 0;
    for (size_t i = 0; i < in_flight_.size(); ++i) {
      const void* group = in_flight_[i]->group();
      const bool is_blocked = std::find(blocked.begin(), blocked.end(), group) != blocked.end();
      if (!is_blocked && in_flight_[i]->mpi_done()) {
        in_flight_[i]->retire();
        in_flight_[i].reset();
        retired = true;
        continue;
      }
      if (!is_blocked) blocked.push_back(group);
      if (kept != i) {
        in_flight_[kept] = std::move(in_flight_[i]);
        requests_[kept] = requests_[i];
      }
      ++kept;
    }
    in_flight_.resize(kept);
    requests_.resize(kept);
  }
  if (retired) done_cv_.notify_all();
}

}  // namespace strata::comm
