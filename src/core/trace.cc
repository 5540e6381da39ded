#include "core/trace.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "core/error.h"

namespace strata::trace {

namespace {

constexpr int kMaxThreads = 64;
constexpr size_t kThreadName = 32;

struct State {
  std::unique_ptr<Event[]> events;
  int64_t capacity = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> dropped{0};
  int64_t epoch_ns = 0;
  Options options;
};
State g_state;

std::atomic<int> g_next_tid{0};
char g_thread_names[kMaxThreads][kThreadName] = {};
thread_local int t_tid = -1;

int thread_id() noexcept {
  if (t_tid < 0) t_tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
  return t_tid;
}

void copy_cut(char* dst, size_t size, const char* src) noexcept {
  size_t n = 0;
  if (src)
    for (; n + 1 < size && src[n]; ++n) dst[n] = src[n];
  dst[n] = '\0';
}

// JSON string contents: quotes, backslashes and control characters escaped.
void append_escaped(std::string& out, const char* s) {
  for (; s && *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
}

void append_event(std::string& out, const Event& e, int pid, int64_t epoch_ns) {
  char buf[128];
  out += "{\"ph\":\"X\",\"name\":\"";
  append_escaped(out, e.name);
  if (e.index >= 0) {
    std::snprintf(buf, sizeof buf, " %d", e.index);
    out += buf;
  }
  out += "\",\"cat\":\"";
  append_escaped(out, e.cat);
  std::snprintf(buf, sizeof buf, "\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", pid,
                static_cast<int>(e.tid), static_cast<double>(e.ts_ns - epoch_ns) / 1e3,
                static_cast<double>(e.dur_ns) / 1e3);
  out += buf;
  if (e.nargs > 0) {
    out += ",\"args\":{";
    for (int i = 0; i < e.nargs; ++i) {
      const Arg& a = e.args[i];
      if (i > 0) out += ',';
      out += '"';
      append_escaped(out, a.key);
      out += "\":";
      if (a.str[0] != '\0') {
        out += '"';
        append_escaped(out, a.str);
        out += '"';
      } else {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(a.num));
        out += buf;
      }
    }
    out += '}';
  }
  out += '}';
}

void append_metadata(std::string& out, const char* what, int pid, int tid, const std::string& name,
                     bool first) {
  if (!first) out += ",\n";
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,", what, pid,
                tid);
  out += buf;
  out += "\"args\":{\"name\":\"";
  append_escaped(out, name.c_str());
  out += "\"}}";
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    STRATA_CHECK(f.good(), "trace: cannot write '", tmp, "'");
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.flush();
    STRATA_CHECK(f.good(), "trace: writing '", tmp, "' failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

void start(const Options& options) {
  g_active.store(false);
  STRATA_CHECK(options.max_events >= 1, "trace: max_events must be at least 1, got ",
               options.max_events);
  if (g_state.capacity != options.max_events) {
    g_state.events.reset();
    g_state.events = std::make_unique<Event[]>(static_cast<size_t>(options.max_events));
    g_state.capacity = options.max_events;
  } else {
    for (int64_t i = 0; i < g_state.capacity; ++i)
      g_state.events[i].ready.store(0, std::memory_order_relaxed);
  }
  g_state.next.store(0);
  g_state.dropped.store(0);
  g_state.options = options;
  g_state.epoch_ns = now_ns();
  const int tid = thread_id();
  if (tid < kMaxThreads && g_thread_names[tid][0] == '\0') name_thread("main");
}

void set_active(bool on) {
  if (on) STRATA_CHECK(g_state.events != nullptr, "trace: set_active(true) before trace::start");
  g_active.store(on, std::memory_order_release);
}

bool started() {
  return g_state.events != nullptr;
}

void reset() {
  g_active.store(false);
  g_state.events.reset();
  g_state.capacity = 0;
  g_state.next.store(0);
  g_state.dropped.store(0);
}

Event* claim(const char* name, const char* cat, int32_t index) noexcept {
  if (!g_state.events) return nullptr;
  const int64_t i = g_state.next.fetch_add(1, std::memory_order_relaxed);
  if (i >= g_state.capacity) {
    g_state.dropped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Event* e = &g_state.events[i];
  e->name = name;
  e->cat = cat;
  e->index = index;
  e->tid = static_cast<uint16_t>(thread_id());
  e->nargs = 0;
  e->dur_ns = 0;
  e->ts_ns = now_ns();
  return e;
}

void finish(Event* e, int64_t end_ns) noexcept {
  e->dur_ns = std::max<int64_t>(0, end_ns - e->ts_ns);
  e->ready.store(1, std::memory_order_release);
}

Event* begin_at(const char* name, const char* cat, int64_t begin_ns, int32_t index) noexcept {
  if (!active()) return nullptr;
  Event* e = claim(name, cat, index);
  if (e) e->ts_ns = begin_ns;
  return e;
}

void set_arg(Event* e, const char* key, int64_t value) noexcept {
  if (e->nargs >= kMaxArgs) return;
  Arg& a = e->args[e->nargs++];
  a.key = key;
  a.num = value;
  a.str[0] = '\0';
}

void set_arg(Event* e, const char* key, const char* value) noexcept {
  if (e->nargs >= kMaxArgs) return;
  Arg& a = e->args[e->nargs++];
  a.key = key;
  a.num = 0;
  copy_cut(a.str, sizeof a.str, value && *value ? value : "?");
}

void name_thread(const char* name) noexcept {
  const int tid = thread_id();
  if (tid < kMaxThreads) copy_cut(g_thread_names[tid], kThreadName, name);
}

int64_t recorded() {
  const int64_t n = std::min(g_state.next.load(), g_state.capacity);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i)
    count += g_state.events[i].ready.load(std::memory_order_acquire) != 0;
  return count;
}

int64_t dropped() {
  return g_state.dropped.load();
}

void write_chrome_json(const std::string& path, const nlohmann::json& other) {
  const int pid = g_state.options.pid;
  const int64_t n = std::min(g_state.next.load(), g_state.capacity);
  std::string out;
  out.reserve(static_cast<size_t>(n) * 160 + 4096);
  out += "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  const std::string pname =
      g_state.options.process_name.empty() ? cat("rank ", pid) : g_state.options.process_name;
  append_metadata(out, "process_name", pid, 0, pname, true);
  out += cat(",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":", pid,
             ",\"tid\":0,\"args\":{\"sort_index\":", pid, "}}");
  std::set<int> tids;
  int64_t written = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Event& e = g_state.events[i];
    if (e.ready.load(std::memory_order_acquire) == 0) continue;
    tids.insert(e.tid);
    out += ",\n";
    append_event(out, e, pid, g_state.epoch_ns);
    ++written;
  }
  for (int tid : tids) {
    const bool named = tid < kMaxThreads && g_thread_names[tid][0] != '\0';
    const std::string tname = named ? std::string(g_thread_names[tid]) : cat("thread ", tid);
    append_metadata(out, "thread_name", pid, tid, tname, false);
    // The training thread first, then the others in the order they started.
    out += cat(",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":", pid, ",\"tid\":", tid,
               ",\"args\":{\"sort_index\":", tname == "main" ? -1 : tid, "}}");
  }
  nlohmann::json meta = other.is_object() ? other : nlohmann::json::object();
  meta["rank"] = pid;
  meta["events"] = written;
  meta["dropped_events"] = dropped();
  meta["clock"] = "steady_clock, microseconds since trace start";
  out += "\n],\"otherData\":" + meta.dump() + "}\n";
  write_text_atomic(path, out);
}

int64_t merge_chrome_json(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json sources = nlohmann::json::array();
  int64_t merged = 0, dropped_total = 0;
  for (const std::string& in : inputs) {
    std::ifstream f(in);
    STRATA_CHECK(f.good(), "trace merge: cannot read '", in, "'");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      fail("trace merge: '", in, "' is not valid JSON: ", e.what());
    }
    STRATA_CHECK(j.contains("traceEvents") && j["traceEvents"].is_array(), "trace merge: '", in,
                 "' has no traceEvents array");
    for (nlohmann::json& e : j["traceEvents"]) {
      if (e.value("ph", "") == "X") ++merged;
      events.push_back(std::move(e));
    }
    if (j.contains("otherData")) dropped_total += j["otherData"].value("dropped_events", 0);
    sources.push_back(std::filesystem::path(in).filename().string());
  }
  nlohmann::json out = {{"displayTimeUnit", "ms"},
                        {"traceEvents", std::move(events)},
                        {"otherData",
                         {{"merged_from", sources},
                          {"events", merged},
                          {"dropped_events", dropped_total},
                          {"clock",
                           "steady_clock, microseconds since each rank's trace start "
                           "(started together after a barrier)"}}}};
  write_text_atomic(output, out.dump() + "\n");
  return merged;
}

}  // namespace strata::trace
