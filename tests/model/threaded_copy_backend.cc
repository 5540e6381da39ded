#include "model/threaded_copy_backend.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace strata::testing {

namespace {

// Two lanes (0: downloads, 1: uploads), each a FIFO served by its own thread; tickets count over
// both, and a lane's `done` is the ticket of the last copy it finished.
class ThreadedCopyQueue final : public CopyQueue {
 public:
  ThreadedCopyQueue() {
    for (Lane& lane : lanes_) lane.thread = std::thread([this, &lane] { work(lane); });
  }
  ~ThreadedCopyQueue() override {  // the copies still queued complete first
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (Lane& lane : lanes_) lane.thread.join();
  }
  ThreadedCopyQueue(const ThreadedCopyQueue&) = delete;
  ThreadedCopyQueue& operator=(const ThreadedCopyQueue&) = delete;

  CopyTicket download(void* host, const void* device, size_t bytes) override {
    return enqueue(0, host, device, bytes);
  }
  CopyTicket upload(void* device, const void* host, size_t bytes) override {
    return enqueue(1, device, host, bytes);
  }
  void wait_host(CopyTicket ticket) override {
    if (ticket == 0) return;
    std::unique_lock<std::mutex> lock(mutex_);
    STRATA_CHECK(ticket <= issued_, "ThreadedCopyQueue: wait for ticket ", ticket,
                 ", which was never issued");
    const Lane& lane = lanes_[lane_of_[ticket - 1]];
    cv_.wait(lock, [&] { return lane.done >= ticket; });
  }
  // The CPU computes on the calling thread as soon as a kernel is called: compute that must come
  // after a copy can only wait for it here.
  void compute_waits_for(CopyTicket ticket) override { wait_host(ticket); }

 private:
  struct Copy {
    CopyTicket ticket = 0;
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  struct Lane {
    std::deque<Copy> queue;
    CopyTicket done = 0;
    std::thread thread;
  };

  CopyTicket enqueue(int lane, void* dst, const void* src, size_t bytes) {
    CopyTicket ticket = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticket = ++issued_;
      lane_of_.push_back(static_cast<uint8_t>(lane));  // one byte per copy: fine for tests
      lanes_[lane].queue.push_back(Copy{ticket, dst, src, bytes});
    }
    cv_.notify_all();
    return ticket;
  }

  void work(Lane& lane) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !lane.queue.empty(); });
      if (lane.queue.empty()) return;  // stopped, and nothing left
      const Copy copy = lane.queue.front();
      lock.unlock();
      // A little later than at once, so that a caller that does not wait is usually caught in the
      // plain build too, not only under ThreadSanitizer.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (copy.bytes > 0) std::memcpy(copy.dst, copy.src, copy.bytes);
      lock.lock();
      lane.queue.pop_front();
      lane.done = copy.ticket;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;  // guards everything below but the threads
  std::condition_variable cv_;
  Lane lanes_[2];
  std::vector<uint8_t> lane_of_;  // ticket - 1 -> its lane
  CopyTicket issued_ = 0;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<CopyQueue> ThreadedCopyBackend::make_copy_queue() {
  return std::make_unique<ThreadedCopyQueue>();
}

}  // namespace strata::testing
