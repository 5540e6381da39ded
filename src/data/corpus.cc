#include "data/corpus.h"

#include <glob.h>
#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/byte_stream.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadChunk = size_t{1} << 20;
constexpr size_t kMaxExamples = 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool has_glob(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> files_below(const std::string& dir) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> glob_matches(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

// The bytes of a file in a growable window: [begin, end) holds data not yet consumed, and
// SIMDJSON_PADDING spare bytes always follow `end` (simdjson reads past a document's end).
class Window {
 public:
  explicit Window(std::unique_ptr<ByteStream> in) : in_(std::move(in)) {
    buf_.resize(kReadChunk + simdjson::SIMDJSON_PADDING);
  }
  const char* data() const { return buf_.data() + begin_; }
  size_t size() const { return end_ - begin_; }
  bool eof() const { return eof_; }
  void consume(size_t n) { begin_ += n; }
  // Reads more (at least one chunk, or to the end of the file), moving the unconsumed bytes to
  // the front and growing the buffer when they fill it. False at the end of the file.
  bool fill() {
    if (eof_) return false;
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() - simdjson::SIMDJSON_PADDING - end_ < kReadChunk)
      buf_.resize(std::max(buf_.size() * 2, end_ + kReadChunk + simdjson::SIMDJSON_PADDING));
    const size_t got = in_->read(buf_.data() + end_, kReadChunk);
    end_ += got;
    if (got == 0) eof_ = true;
    return got > 0;
  }
  // Forgets the unconsumed bytes (a record too long to hold: skipped unread).

 private:
  std::unique_ptr<ByteStream> in_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
};

// A dotted field path as a JSON pointer: "meta.content" -> "/meta/content" ('~', '/' escaped).
std::string json_pointer(const std::string& field) {
  std::string out;
  out.reserve(field.size() + 8);
  out.push_back('/');
  for (char c : field) {
    if (c == '.') {
      out.push_back('/');
    } else if (c == '~') {
      out.append("~0");
    } else if (c == '/') {
      out.append("~1");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

int64_t count_newlines(const char* p, size_t n) {
  return static_cast<int64_t>(std::count(p, p + n, '\n'));
}

// Documents separated by a string: the streaming form of split_documents (filters.h), with the
// same pieces (empty ones dropped, the rest byte for byte).
class TextReader final : public DocumentReader {
 public:
  TextReader(const std::string& path, const CorpusOptions& o)
      : window_(open_byte_stream(path)), sep_(o.document_separator), max_(o.max_document_bytes) {}

  bool next(Document& doc) override {
    doc = Document();
    for (;;) {
      // Consume what the last call handed out (it stayed valid until now).
      window_.consume(pending_consume_);
      pending_consume_ = 0;
      const std::string_view data(window_.data(), window_.size());
      const size_t found = sep_.empty() ? std::string_view::npos : data.find(sep_, scanned_);
      if (found != std::string_view::npos || (window_.eof() && !data.empty())) {
        const size_t len = found == std::string_view::npos ? data.size() : found;
        const size_t used = found == std::string_view::npos ? len : len + sep_.size();
        const int64_t start_line = line_;
        line_ += count_newlines(data.data(), used);
        pending_consume_ = used;
        scanned_ = 0;
        if (skipped_ > 0) {  // the end of a document too long to hold
          doc.oversize_bytes = skipped_ + static_cast<int64_t>(len);
          doc.line = skipped_line_;
          skipped_ = 0;
          return true;
        }
        if (len == 0) continue;  // an empty piece is not a document
        doc.text = data.substr(0, len);
        doc.line = start_line;
        return true;
      }
      if (window_.eof()) {
        if (skipped_ > 0) {
          doc.oversize_bytes = skipped_;
          doc.line = skipped_line_;
          skipped_ = 0;
          return true;
        }
        return false;
      }
      // No separator yet: keep the last sep-1 bytes for a separator split across reads.
      scanned_ = data.size() >= sep_.size() ? data.size() - sep_.size() + 1 : 0;
      if (static_cast<int64_t>(data.size()) > max_) {
        // Too long to hold: drop what we have (keeping a possible partial separator).
        if (skipped_ == 0) skipped_line_ = line_;
        const size_t keep = sep_.empty() ? 0 : std::min(data.size(), sep_.size() - 1);
        const size_t gone = data.size() - keep;
        skipped_ += static_cast<int64_t>(gone);
        line_ += count_newlines(data.data(), gone);
        window_.consume(gone);
        scanned_ = 0;
      }
      window_.fill();
    }
  }

 private:
  Window window_;
  std::string sep_;
  int64_t max_;
  size_t scanned_ = 0;  // bytes of the window already searched for the separator
  size_t pending_consume_ = 0;
  int64_t line_ = 1;
  int64_t skipped_ = 0, skipped_line_ = 0;
};

// JSON Lines: each non-blank line is one object; the document is its `field` (a dotted path).
class JsonlReader final : public DocumentReader {
 public:
  JsonlReader(const CorpusFile& file, const CorpusOptions& o, BadRecords& bad)
      : path_(file.path),
        window_(open_byte_stream(file.path, file.begin > 0 ? file.begin - 1 : 0)),
        max_line_(o.max_line_bytes),
        bad_(bad),
        pointer_(json_pointer(o.field)),
        field_(o.field),
        ranged_(file.begin > 0),
        offset_(file.begin > 0 ? file.begin - 1 : 0),
        end_(file.end) {
    // From byte begin - 1: the first line of the range starts after the first newline there (at
    // begin itself when that byte is one); the line it ends belongs to the range before.
    if (ranged_) skip_line();
  }

  bool next(Document& doc) override {
    doc = Document();
    for (;;) {
      consume(pending_consume_);
      pending_consume_ = 0;
      if (end_ >= 0 && offset_ >= end_) return false;  // the next line is the next range's
      const std::string_view data(window_.data(), window_.size());
      const size_t nl = data.find('\n', scanned_);
      if (nl == std::string_view::npos && !window_.eof()) {
        scanned_ = data.size();
        if (static_cast<int64_t>(data.size()) > max_line_) {
          skip_long_line();
          continue;
        }
        window_.fill();
        continue;
      }
      if (nl == std::string_view::npos && data.empty()) return false;
      const size_t len = nl == std::string_view::npos ? data.size() : nl;
      pending_consume_ = nl == std::string_view::npos ? len : len + 1;
      scanned_ = 0;
      const int64_t line = ++line_;
      std::string_view text = data.substr(0, len);
      if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
      bad_.count_record();
      if (parse(text, line, doc)) return true;
    }
  }

 private:
  // "file:line"; in a range after the first, whose line numbers are not known without reading
  // everything before it, the line's byte offset instead.
  std::string where(int64_t line) const {
    return ranged_ ? cat(path_, " (the line at byte ", offset_, ")") : cat(path_, ":", line);
  }

  bool parse(std::string_view text, int64_t line, Document& doc) {
    // The window keeps SIMDJSON_PADDING bytes after its data, so the line needs no copy.
    simdjson::dom::element root;
    if (const auto err = parser_.parse(text.data(), text.size(), false).get(root)) {
      bad_.add(where(line), cat("malformed JSON (", simdjson::error_message(err), ")"));
      return false;
    }
    if (!root.is_object()) {
      bad_.add(where(line), "not a JSON object");
      return false;
    }
    simdjson::dom::element value;
    if (root.at_pointer(pointer_).get(value)) {
      bad_.add(where(line), cat("no field '", field_, "'"));
      return false;
    }
    std::string_view s;
    if (value.get_string().get(s)) {
      bad_.add(where(line), cat("field '", field_, "' is ", type_name(value), ", not a string"));
      return false;
    }
    doc.text = s;  // in the parser's string buffer: valid until the next parse
    doc.line = line;
    return true;
  }

  static const char* type_name(const simdjson::dom::element& e) {
    switch (e.type()) {
      case simdjson::dom::element_type::ARRAY:
        return "an array";
      case simdjson::dom::element_type::OBJECT:
        return "an object";
      case simdjson::dom::element_type::NULL_VALUE:
        return "null";
      case simdjson::dom::element_type::BOOL:
        return "a boolean";
      default:
        return "a number";
    }
  }

  void skip_long_line() {
    const int64_t line = ++line_;
    const std::string at = where(line);
    bad_.count_record();
    skip_line();
    bad_.add(at, cat("line longer than ", max_line_, " bytes"));
  }

  // Discards up to and including the next newline, reading through the rest of the line.
  void skip_line() {
    for (;;) {
      const std::string_view data(window_.data(), window_.size());
      const size_t nl = data.find('\n');
      if (nl != std::string_view::npos) {
        consume(nl + 1);
        break;
      }
      consume(data.size());
      if (!window_.fill()) break;
    }
    scanned_ = 0;
  }

  void consume(size_t n) {
    window_.consume(n);
    offset_ += static_cast<int64_t>(n);
  }

  std::string path_;
  Window window_;
  int64_t max_line_;
  BadRecords& bad_;
  std::string pointer_, field_;
  simdjson::dom::parser parser_;
  bool ranged_;     // a range after the first: lines are named by byte offset
  int64_t offset_;  // file offset of the window's first byte
  int64_t end_;     // lines starting at or after this byte are not this range's (< 0: none)
  size_t scanned_ = 0, pending_consume_ = 0;
  int64_t line_ = 0;
};

}  // namespace

CorpusFormat format_of(const std::string& path) {
  const std::string file = fs::path(path).filename().string();
  std::string_view name = file;
  for (std::string_view z : {".gz", ".zst", ".zstd"})
    if (ends_with(name, z)) {
      name.remove_suffix(z.size());
      break;
    }
  for (const char* j : {".jsonl", ".json", ".ndjson"})
    if (ends_with(name, j)) return CorpusFormat::jsonl;
  return CorpusFormat::text;
}

std::vector<CorpusFile> expand_inputs(const std::vector<std::string>& patterns,
                                      CorpusFormat format) {
  STRATA_CHECK(!patterns.empty(), "prepare: no input files given");
  std::vector<CorpusFile> out;
  for (const std::string& p : patterns) {
    std::vector<std::string> paths;
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      paths = files_below(p);
    } else if (has_glob(p) && !fs::exists(p, ec)) {
      paths = glob_matches(p);
    } else {
      STRATA_CHECK(fs::exists(p, ec), "prepare: input '", p, "' does not exist");
      paths = {p};
    }
    STRATA_CHECK(!paths.empty(), "prepare: input '", p, "' matches no files");
    for (const std::string& path : paths) {
      std::string bare = fs::path(path).filename().string();
      STRATA_CHECK(!ends_with(bare, ".parquet"), "prepare: '", path,
                   "' is Parquet, which strata does not read (docs/ARCHITECTURE.md says why); "
                   "convert it to JSON Lines with tools/parquet_to_jsonl.py first");
      out.push_back({path, format == CorpusFormat::auto_detect ? format_of(path) : format});
    }
  }
  return out;
}

void BadRecords::add(const std::string& where, const std::string& why) {
  ++count_;
  std::string example = where;
  example.append(": ").append(why);
  STRATA_CHECK(max_fraction_ > 0, "prepare: bad record at ", example,
               "; fix the input, or tolerate bad records with --max-bad-fraction (e.g. 0.001)");
  if (examples_.size() < kMaxExamples) examples_.push_back(example);
}

void BadRecords::merge(int64_t count, int64_t records, const std::vector<std::string>& examples) {
  count_ += count;
  records_ += records;
  for (const std::string& e : examples)
    if (examples_.size() < kMaxExamples) examples_.push_back(e);
}

void BadRecords::check() const {
  if (count_ == 0) return;
  const double fraction =
      static_cast<double>(count_) / static_cast<double>(std::max<int64_t>(1, records_));
  STRATA_CHECK(fraction <= max_fraction_, "prepare: ", count_, " bad records of ", records_, " (",
               fraction, ") exceed --max-bad-fraction ", max_fraction_,
               "; the first: ", examples_.empty() ? std::string("?") : examples_.front());
}

std::vector<CorpusFile> split_into_units(const std::vector<CorpusFile>& files,
                                         int64_t range_bytes) {
  STRATA_CHECK(range_bytes > 0, "prepare: the unit size must be positive, not ", range_bytes);
  std::vector<CorpusFile> units;
  for (const CorpusFile& f : files) {
    std::error_code ec;
    const auto size = static_cast<int64_t>(fs::file_size(f.path, ec));
    STRATA_CHECK(!ec, "prepare: cannot read the size of '", f.path, "': ", ec.message());
    if (f.format != CorpusFormat::jsonl || size <= range_bytes ||
        sniff_compression(f.path) != Compression::none) {
      units.push_back(f);
      continue;
    }
    const int64_t n = (size + range_bytes - 1) / range_bytes;
    for (int64_t i = 0; i < n; ++i) {
      CorpusFile u = f;
      u.begin = size * i / n;
      u.end = i + 1 == n ? -1 : size * (i + 1) / n;
      units.push_back(u);
    }
  }
  return units;
}

std::unique_ptr<DocumentReader> open_documents(const CorpusFile& file, const CorpusOptions& options,
                                               BadRecords& bad) {
  if (file.format == CorpusFormat::jsonl) return std::make_unique<JsonlReader>(file, options, bad);
  STRATA_CHECK(file.begin == 0 && file.end < 0, "prepare: the text file '", file.path,
               "' cannot be read in ranges");
  return std::make_unique<TextReader>(file.path, options);
}

}  // namespace strata::data
