// Corpus files: which files a prepare reads (globs and directories expanded, in a fixed order),
// in which format, and the documents in each, streamed through a buffer of bounded size:
//   text   documents separated by a string (a blank line by default), as data.text has always been;
//   jsonl  JSON Lines, one document per line, its text in a chosen field (`text`, or a dotted path
//          such as `meta.content`); plain, .gz or .zst (ByteStream, byte_stream.h).
// A record that cannot be read (malformed JSON, a missing or non-string field, an over-long line)
// is a bad record: named with its file and line, counted, and skipped while the bad fraction stays
// within CorpusOptions::max_bad_fraction (0: the first one stops the prepare).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"

namespace strata::data {

enum class CorpusFormat { auto_detect, text, jsonl };

struct CorpusOptions {
  CorpusFormat format = CorpusFormat::auto_detect;  // auto: by the name (.jsonl/.json/.ndjson)
  std::string field = "text";                       // jsonl: the text's field, dotted path
  std::string document_separator = "\n\n";          // text
  // Bad records tolerated, as a fraction of the records read; above it the prepare stops.
  double max_bad_fraction = 0;
  // A text document longer than this many bytes is not held in memory: it is skipped and counted
  // as too long (the filters would drop it: it has more than max_doc_chars characters).
  int64_t max_document_bytes = int64_t{4} << 20;
  int64_t max_line_bytes = int64_t{256} << 20;  // jsonl: a longer line is a bad record
};

// One input file, or a range of one, and how it is read.
struct CorpusFile {
  std::string path;
  CorpusFormat format = CorpusFormat::text;
  // An uncompressed JSON Lines file may be read in ranges: the documents whose lines start at a
  // byte in [begin, end) (end < 0: to the end of the file). Consecutive ranges read every line
  // once, whatever their boundaries.
  int64_t begin = 0, end = -1;
};

// Expands files, directories (every regular file below, recursively, hidden ones excepted) and
// glob patterns, each pattern's matches sorted by path, in the order given, and decides each one's
// format. Throws naming a pattern that matches nothing, or a Parquet file (see the message).
std::vector<CorpusFile> expand_inputs(const std::vector<std::string>& patterns,
                                      CorpusFormat format);

// The units a prepare distributes over its threads and processes: every file, with uncompressed
// JSON Lines files larger than `range_bytes` cut into ranges of about that many bytes (text and
// compressed files stay whole: neither can be entered midway). Depends on the files and
// range_bytes only, so the units, and the output, are the same whatever the number of workers.
std::vector<CorpusFile> split_into_units(const std::vector<CorpusFile>& files, int64_t range_bytes);

// The format a path's name implies (compression suffixes .gz, .zst, .zstd ignored).
CorpusFormat format_of(const std::string& path);

// Bad records of a whole prepare: the count, and the first few named.
class BadRecords {
 public:
  explicit BadRecords(double max_fraction) : max_fraction_(max_fraction) {}
  // Records one (where: "file:line", why); throws at once when no bad record is tolerated.
  void add(const std::string& where, const std::string& why);
  // Another unit's count, records and examples (a prepare's units are read apart).
  void merge(int64_t count, int64_t records, const std::vector<std::string>& examples);
  void count_record() { ++records_; }
  // Throws when the bad fraction of the records read exceeds the threshold.
  void check() const;
  int64_t count() const { return count_; }
  int64_t records() const { return records_; }
  const std::vector<std::string>& examples() const { return examples_; }

 private:
  double max_fraction_;
  int64_t count_ = 0, records_ = 0;
  std::vector<std::string> examples_;  // "file:line: why", the first kMaxExamples
};

struct Document {
  std::string_view text;  // valid until the next call to next()
  int64_t line = 0;       // 1-based line of the file where it starts
  // > 0: a text document of this many bytes, longer than max_document_bytes, skipped unread.
  int64_t oversize_bytes = 0;
};

class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // The next document; false at the end of the file. Bad records go to `bad` (see above).
  virtual bool next(Document& doc) = 0;
};

std::unique_ptr<DocumentReader> open_documents(const CorpusFile& file, const CorpusOptions& options,
                                               BadRecords& bad);

}  // namespace strata::data

namespace strata {
template <>
struct EnumNames<data::CorpusFormat> {
  static constexpr std::string_view names[] = {"auto", "text", "jsonl"};
};
}  // namespace strata
