// Sorting more fixed-size records than fit in memory: the records are buffered up to a budget of
// bytes, each full buffer is sorted and written to a run file, and reading merges the runs with a
// heap (the classic external merge sort; datatrove's deduplication sorts its signatures the same
// way). Memory is the buffer plus one read buffer per run, whatever the number of records; a sort
// that fits in one buffer never touches the disk. Used by the prepare's deduplication, whose keys
// grow with the corpus (corpus_dedup.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <queue>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace strata::data {

template <class T, class Less = std::less<T>>
class ExternalSort {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // Run files go to dir/NAME.K.run (dir must exist) and are removed with the sort.
  ExternalSort(std::string dir, std::string name, int64_t memory_bytes)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        capacity_(std::max<size_t>(16, static_cast<size_t>(memory_bytes) / sizeof(T))),
        memory_bytes_(memory_bytes) {}
  ~ExternalSort() {
    for (Run& r : runs_)
      if (r.file) std::fclose(r.file);
    std::error_code ec;
    for (size_t k = 0; k < runs_.size(); ++k) std::filesystem::remove(run_path(k), ec);
  }
  ExternalSort(const ExternalSort&) = delete;
  ExternalSort& operator=(const ExternalSort&) = delete;

  void add(const T& v) {
    if (buffer_.size() == buffer_.capacity()) {
      if (buffer_.size() >= capacity_)
        spill();
      else  // grown by hand: doubling past the budget would hold twice the memory it allows
        buffer_.reserve(std::min(capacity_, std::max<size_t>(16, 2 * buffer_.capacity())));
    }
    buffer_.push_back(v);
  }

  // Ends the adding: next() then yields every record added, in ascending order.
  void finish() {
    std::sort(buffer_.begin(), buffer_.end(), Less());
    if (runs_.empty()) return;  // all in memory
    if (!buffer_.empty()) spill();
    std::vector<T>().swap(buffer_);
    const size_t read_bytes = std::clamp<size_t>(
        static_cast<size_t>(memory_bytes_) / (2 * runs_.size()), size_t{64} << 10, size_t{1} << 20);
    for (size_t k = 0; k < runs_.size(); ++k) {
      Run& r = runs_[k];
      r.file = std::fopen(run_path(k).c_str(), "rb");
      STRATA_CHECK(r.file != nullptr, "prepare: cannot read back '", run_path(k), "'");
      r.buffer.resize(std::max<size_t>(1, read_bytes / sizeof(T)));
      if (refill(k)) heap_.push(k);
    }
  }

  bool next(T& out) {
    if (runs_.empty()) {
      if (pos_ == buffer_.size()) return false;
      out = buffer_[pos_++];
      return true;
    }
    if (heap_.empty()) return false;
    const size_t k = heap_.top();
    heap_.pop();
    Run& r = runs_[k];
    out = r.buffer[r.pos++];
    if (r.pos < r.size || refill(k)) heap_.push(k);
    return true;
  }

  size_t runs() const { return runs_.size(); }

 private:
  struct Run {
    FILE* file = nullptr;
    std::vector<T> buffer;
    size_t pos = 0, size = 0;
  };
  // Orders run indices by their current record, smallest on top; ties by run, so equal records
  // come out in the order they were added.
  struct RunAfter {
    const ExternalSort* s;
    bool operator()(size_t a, size_t b) const {
      const T& x = s->runs_[a].buffer[s->runs_[a].pos];
      const T& y = s->runs_[b].buffer[s->runs_[b].pos];
      if (Less()(y, x)) return true;
      if (Less()(x, y)) return false;
      return a > b;
    }
  };

  std::string run_path(size_t k) const {
    return dir_ + "/" + name_ + "." + std::to_string(k) + ".run";
  }

  void spill() {
    std::sort(buffer_.begin(), buffer_.end(), Less());
    const std::string path = run_path(runs_.size());
    FILE* f = std::fopen(path.c_str(), "wb");
    STRATA_CHECK(f != nullptr, "prepare: cannot create '", path, "'");
    const size_t written = std::fwrite(buffer_.data(), sizeof(T), buffer_.size(), f);
    const bool closed = std::fclose(f) == 0;
    STRATA_CHECK(written == buffer_.size() && closed, "prepare: cannot write '", path,
                 "' (is the disk full?)");
    runs_.emplace_back();
    buffer_.clear();
  }

  bool refill(size_t k) {
    Run& r = runs_[k];
    r.size = std::fread(r.buffer.data(), sizeof(T), r.buffer.size(), r.file);
    r.pos = 0;
    return r.size > 0;
  }

  std::string dir_, name_;
  size_t capacity_;
  int64_t memory_bytes_;
  std::vector<T> buffer_;
  size_t pos_ = 0;  // next() over the buffer, when nothing was spilled
  std::vector<Run> runs_;
  std::priority_queue<size_t, std::vector<size_t>, RunAfter> heap_{RunAfter{this}};
};

}  // namespace strata::data
