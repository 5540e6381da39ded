// The profiler's tracer: spans of time recorded as Chrome trace "complete" events (the JSON that
// Perfetto and chrome://tracing open), one file per rank, merged into one for the whole job.
//
//   trace::start(options);                               // preallocates the event buffer
//   trace::set_active(true);                             // the profiled window of steps
//   { TraceSpan s("fwd layer", "compute", 3); ... }      // "fwd layer 3", on this thread
//   { TraceSpan s("all_reduce", "comm"); s.arg("bytes", n).arg("group", "dp"); ... }
//   trace::write_chrome_json("run/trace/rank_0.json");
//
// Cost: while inactive a span is one relaxed load of an atomic bool (a few nanoseconds, measured
// in tests/core). While active it takes a slot of the preallocated buffer (one atomic add) and
// reads the steady clock twice: nothing allocates, so profiling keeps DESIGN invariant 5. A full
// buffer drops further events and counts them. Timestamps are steady-clock nanoseconds; the
// files give microseconds from the epoch set by start() (the trainer starts every rank right
// after a barrier, so the ranks' timelines line up in the merged file).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

namespace trace {

// One argument of an event: a number, or a short string (copied; longer ones are cut).
struct Arg {
  const char* key = nullptr;  // a string literal
  int64_t num = 0;
  char str[24] = {};  // empty: the argument is `num`
};
constexpr int kMaxArgs = 4;

struct Event {
  int64_t ts_ns = 0, dur_ns = 0;  // steady clock
  const char* name = nullptr;     // string literals: the buffer keeps only the pointers
  const char* cat = nullptr;
  int32_t index = -1;  // >= 0: appended to the name ("fwd layer" 3 -> "fwd layer 3")
  uint16_t tid = 0;
  uint8_t nargs = 0;
  std::atomic<uint8_t> ready{0};  // set once the event is complete (the writer skips the rest)
  Arg args[kMaxArgs];
};

struct Options {
  int64_t max_events = 65536;  // buffer size, all threads together (~200 bytes each)
  int pid = 0;                 // the rank: Chrome trace's process id
  std::string process_name;    // shown for the pid ("rank 0 (tp 0, pp 0, dp 0)"); "" -> "rank N"
};

// The switch every span reads. Not a function call: an inline atomic.
inline std::atomic<bool> g_active{false};
inline bool active() noexcept {
  return g_active.load(std::memory_order_relaxed);
}

inline int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t to_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Allocates (and touches) the buffer, drops earlier events, sets the epoch to now; the tracer
// stays inactive until set_active(true). Not while other threads record.
void start(const Options& options);
void set_active(bool on);
bool started();
// Frees the buffer and forgets every event (inactive afterwards). Not while other threads record.
void reset();

// Claims the next slot for the calling thread (nullptr when inactive or the buffer is full).
Event* claim(const char* name, const char* cat, int32_t index) noexcept;
// Marks a claimed event complete with its end time.
void finish(Event* e, int64_t end_ns) noexcept;
// An event whose start is known after the fact (a collective, from issue to completion): claimed
// with its begin time (nullptr when inactive or full); set its arguments, then finish() it.
Event* begin_at(const char* name, const char* cat, int64_t begin_ns, int32_t index = -1) noexcept;
// A span from `begin` to now, for code that already holds its start time.
inline void complete_since(const char* name, const char* cat,
                           std::chrono::steady_clock::time_point begin) noexcept {
  if (active()) [[unlikely]]
    if (Event* e = begin_at(name, cat, to_ns(begin))) finish(e, now_ns());
}
void set_arg(Event* e, const char* key, int64_t value) noexcept;
void set_arg(Event* e, const char* key, const char* value) noexcept;

// Names the calling thread in the trace ("main", "comm progress", "checkpoint writer"). Any time,
// also before start(); the first 64 threads that record get a name slot.
void name_thread(const char* name) noexcept;

int64_t recorded();  // completed events in the buffer
int64_t dropped();   // events lost to a full buffer since start()

// The completed events as a Chrome trace JSON object ({"traceEvents": [...], "otherData": ...}),
// with process and thread names; `other` goes into "otherData". Written to path.tmp, then
// renamed. Safe while other threads still record (their unfinished events are left out).
void write_chrome_json(const std::string& path, const nlohmann::json& other = {});
// Merges the per-rank files (each a write_chrome_json output) into one file: every event, each
// rank its own process; "otherData" lists the inputs. Returns the number of events merged.
int64_t merge_chrome_json(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace trace

// RAII span on the calling thread: one complete ("X") event from construction to destruction.
// Name and category must be string literals (or otherwise outlive the trace).
class TraceSpan {
 public:
  TraceSpan(const char* name, const char* cat, int64_t index = -1) noexcept {
    if (trace::active()) [[unlikely]]
      begin(name, cat, index);
  }
  ~TraceSpan() {
    if (event_) [[unlikely]]
      trace::finish(event_, trace::now_ns());
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  TraceSpan& arg(const char* key, int64_t value) noexcept {
    if (event_) [[unlikely]]
      trace::set_arg(event_, key, value);
    return *this;
  }
  TraceSpan& arg(const char* key, const char* value) noexcept {
    if (event_) [[unlikely]]
      trace::set_arg(event_, key, value);
    return *this;
  }
  TraceSpan& arg(const char* key, const std::string& value) noexcept {
    return arg(key, value.c_str());
  }
  bool recording() const { return event_ != nullptr; }

 private:
  void begin(const char* name, const char* cat, int64_t index) noexcept {
    event_ = trace::claim(name, cat, static_cast<int32_t>(index));
  }
  trace::Event* event_ = nullptr;
};

}  // namespace strata
