#include "data/prepare.h"

#include <omp.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "data/file_util.h"
#include "data/manifest.h"
#include "data/prepare_record.h"
#include "data/prepare_stages.h"
#include "data/prepare_work.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

// Hands the heap's free memory back to the system between stages: the scan's tokenizer sample is
// hundreds of MB of small strings, which glibc keeps after they are freed, and the plan's sort
// buffers (large, so mapped afresh) would otherwise add to them in the peak.
void release_free_memory() {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json stats_json(const DocStats& s) {
  return {{"documents", s.documents}, {"bytes", s.bytes}};
}

}  // namespace

nlohmann::json PrepareReport::to_json() const {
  return {{"files", files},
          {"units", units},
          {"workers", workers},
          {"reused", reused},
          {"seen", stats_json(seen)},
          {"kept", stats_json(kept)},
          {"removed",
           {{"invalid_utf8", stats_json(invalid_utf8)},
            {"too_short", stats_json(too_short)},
            {"too_long", stats_json(too_long)},
            {"repetitive", stats_json(repetitive)},
            {"nonprint", stats_json(nonprint)},
            {"duplicate", stats_json(duplicate)},
            {"near_duplicate", stats_json(near_duplicate)}}},
          {"train",
           {{"documents", train.documents},
            {"bytes", train.bytes},
            {"tokens", train_tokens},
            {"shards", train_shards}}},
          {"val",
           {{"documents", val.documents},
            {"bytes", val.bytes},
            {"tokens", val_tokens},
            {"shards", val_shards}}},
          {"vocab_size", vocab_size},
          {"tokenizer", tokenizer},
          {"tokenizer_sample", stats_json(tokenizer_sample)},
          {"tokenizer_sample_rereads", tokenizer_sample_rereads},
          {"records", records},
          {"bad_records", bad_records},
          {"bad_examples", bad_examples},
          {"tokenizer_seconds", tokenizer_seconds},
          {"scan_seconds", scan_seconds},
          {"encode_seconds", encode_seconds},
          {"seconds", seconds}};
}

PrepareReport PrepareReport::from_json(const nlohmann::json& j) {
  auto stats = [](const nlohmann::json& s) {
    return DocStats{s.at("documents").get<int64_t>(), s.at("bytes").get<int64_t>()};
  };
  PrepareReport r;
  r.files = j.at("files").get<int64_t>();
  r.units = j.at("units").get<int64_t>();
  r.workers = j.at("workers").get<int>();
  r.reused = j.at("reused").get<int64_t>();
  r.seen = stats(j.at("seen"));
  r.kept = stats(j.at("kept"));
  const nlohmann::json& removed = j.at("removed");
  r.invalid_utf8 = stats(removed.at("invalid_utf8"));
  r.too_short = stats(removed.at("too_short"));
  r.too_long = stats(removed.at("too_long"));
  r.repetitive = stats(removed.at("repetitive"));
  r.nonprint = stats(removed.at("nonprint"));
  r.duplicate = stats(removed.at("duplicate"));
  r.near_duplicate = stats(removed.at("near_duplicate"));
  for (auto [split, docs, tokens, shards] :
       {std::tuple{"train", &r.train, &r.train_tokens, &r.train_shards},
        std::tuple{"val", &r.val, &r.val_tokens, &r.val_shards}}) {
    const nlohmann::json& s = j.at(split);
    *docs = stats(s);
    *tokens = s.at("tokens").get<int64_t>();
    *shards = s.at("shards").get<int64_t>();
  }
  r.vocab_size = j.at("vocab_size").get<int64_t>();
  r.tokenizer = j.at("tokenizer").get<std::string>();
  r.tokenizer_sample = stats(j.at("tokenizer_sample"));
  r.tokenizer_sample_rereads = j.at("tokenizer_sample_rereads").get<int64_t>();
  r.records = j.at("records").get<int64_t>();
  r.bad_records = j.at("bad_records").get<int64_t>();
  r.bad_examples = j.at("bad_examples").get<std::vector<std::string>>();
  r.tokenizer_seconds = j.at("tokenizer_seconds").get<double>();
  r.scan_seconds = j.at("scan_seconds").get<double>();
  r.encode_seconds = j.at("encode_seconds").get<double>();
  r.seconds = j.at("seconds").get<double>();
  return r;
}

std::string PrepareReport::summary() const {
  if (!complete)
    return cat("prepare worker ", worker, " of ", workers, ": scanned ", units_scanned,
               ", encoded ", units_encoded, " of ", units, " unit(s), wrote ", shards_written,
               " shard(s)", reused > 0 ? cat(" (", reused, " found done)") : std::string(),
               "; worker 0 writes the manifest");
  const double bytes_per_token =
      train_tokens > 0 ? static_cast<double>(train.bytes) / static_cast<double>(train_tokens) : 0;
  char line[256];
  std::snprintf(line, sizeof line, "%.2f bytes/token", bytes_per_token);
  return cat(
      "prepared ", files, " file(s) (", units, " unit(s), ", workers, " worker(s)",
      reused > 0 ? cat(", resumed: ", reused, " records reused") : std::string(),
      "): ", seen.documents, " documents (", seen.bytes, " bytes), kept ", kept.documents, " (",
      kept.bytes, " bytes)\n", "  removed: invalid_utf8 ", invalid_utf8.documents, ", too_short ",
      too_short.documents, ", too_long ", too_long.documents, ", repetitive ", repetitive.documents,
      ", nonprint ", nonprint.documents, ", duplicate ", duplicate.documents, ", near_duplicate ",
      near_duplicate.documents, "\n", "  train: ", train.documents, " documents, ", train_tokens,
      " tokens in ", train_shards, " shard(s); val: ", val.documents, " documents, ", val_tokens,
      " tokens in ", val_shards, " shard(s)\n", "  tokenizer: ", tokenizer, ", vocab ", vocab_size,
      ", ", line,
      tokenizer == "trained"
          ? cat("; trained on ", tokenizer_sample.bytes, " bytes in ", tokenizer_seconds, " s")
          : std::string(),
      ", scanned in ", scan_seconds, " s, encoded in ", encode_seconds,
      " s (worker-seconds), total ", seconds, " s",
      bad_records > 0 ? cat("\n  bad records: ", bad_records, " of ", records, ", the first ",
                            bad_examples.empty() ? std::string() : bad_examples.front())
                      : std::string());
}

double split_draw(std::string_view doc, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);  // FNV-1a, seeded
  for (char c : doc) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  h ^= h >> 33;  // FNV's low bits mix poorly: finish with a murmur-style avalanche
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

namespace {

// Runs fn(u) for every unit in `pending`. With at least as many units as threads, each thread takes
// whole units (reading and parsing scale too; the stages' own parallel loops then run on the
// thread that calls them); with fewer, one unit at a time, each spread over every thread. The
// first error in unit order is rethrown once all have stopped.
void for_each_unit(const std::vector<int64_t>& pending, const std::function<void(int64_t)>& fn) {
  const auto n = static_cast<int64_t>(pending.size());
  const bool across = omp_get_max_threads() > 1 && n >= omp_get_max_threads();
  std::vector<std::exception_ptr> errors(pending.size());
#pragma omp parallel for schedule(dynamic, 1) if (across)
  for (int64_t i = 0; i < n; ++i) {
    try {
      fn(pending[static_cast<size_t>(i)]);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// Temporary files a killed prepare left in the output folder: a shard's (".train_003.bin.tmp-..."),
// the manifest's, the tokenizer's or the report's ("manifest.json.tmp.PID").
void remove_stale_temporaries(const std::string& out_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool shard_temp = (name.rfind(".train_", 0) == 0 || name.rfind(".val_", 0) == 0) &&
                            name.find(".bin.tmp-") != std::string::npos;
    bool json_temp = false;
    for (const char* f : {"manifest.json.tmp.", "tokenizer.json.tmp.", "prepare_report.json.tmp."})
      json_temp = json_temp || name.rfind(f, 0) == 0;
    if (e.is_regular_file(ec) && (shard_temp || json_temp)) fs::remove(e.path(), ec);
  }
}

int64_t unit_bytes(const CorpusFile& unit) {
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(unit.path, ec));
  STRATA_CHECK(!ec, "prepare: cannot read the size of '", unit.path, "': ", ec.message());
  return (unit.end < 0 ? size : unit.end) - unit.begin;
}

// What is prepared: every unit (with its file's size and time, so a changed input is a new job)
// and every option that changes the output, and the records' format (a folder an older build
// left is another job's, cleared rather than misread). Not the batch size, the workers or the
// stage.
std::string job_description(const PrepareOptions& o, const std::vector<CorpusFile>& units) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const CorpusFile& u : units) {
    std::error_code ec;
    const auto time = fs::last_write_time(u.path, ec).time_since_epoch().count();
    inputs.push_back({{"path", u.path},
                      {"format", enum_name(u.format)},
                      {"begin", u.begin},
                      {"end", u.end},
                      {"size", unit_bytes(u)},
                      {"time", static_cast<int64_t>(time)}});
  }
  std::string tokenizer;
  if (!o.tokenizer.empty()) {
    std::error_code ec;
    tokenizer = cat(fs::absolute(o.tokenizer).string(), " ", fs::file_size(o.tokenizer, ec), " ",
                    fs::last_write_time(o.tokenizer, ec).time_since_epoch().count());
  }
  const FilterConfig& f = o.filters;
  return nlohmann::json{
             {"records", kPrepareRecordMagic},
             {"inputs", inputs},
             {"field", o.corpus.field},
             {"separator", o.corpus.document_separator},
             {"max_bad_fraction", o.corpus.max_bad_fraction},
             {"max_document_bytes", o.corpus.max_document_bytes},
             {"max_line_bytes", o.corpus.max_line_bytes},
             {"filters",
              {f.min_doc_chars, f.max_doc_chars, f.max_repeat_fraction, f.max_nonprint_fraction}},
             {"dedup", enum_name(o.dedup)},
             {"minhash", {o.minhash.ngram, o.minhash.bands, o.minhash.rows, o.minhash.seed}},
             {"vocab_size", o.vocab_size},
             {"val_fraction", o.val_fraction},
             {"seed", o.seed},
             {"tokenizer", tokenizer},
             {"eot_token", o.eot_token},
             {"tokenizer_sample_bytes", o.tokenizer_sample_bytes},
             {"max_shard_tokens", o.max_shard_tokens},
             {"range_bytes", o.range_bytes}}
             .dump(1) +
         "\n";
}

}  // namespace

PrepareReport prepare(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  STRATA_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "data.val_fraction = ", o.val_fraction,
               " must be in [0, 1)");
  STRATA_CHECK(o.batch_bytes > 0 && o.tokenizer_sample_bytes > 0,
               "prepare: the batch and the tokenizer sample need a positive size");
  STRATA_CHECK(o.eot_token.empty() || !o.tokenizer.empty(),
               "prepare: --eot-token names a token of the tokenizer given with --tokenizer; a "
               "trained tokenizer ends documents with ",
               kEndOfText);
  STRATA_CHECK(o.workers >= 1 && o.worker >= 0 && o.worker < o.workers, "prepare: worker ",
               o.worker, " of ", o.workers, " does not exist; --worker is in [0, --workers)");
  PrepareOptions opt = o;
  // A document of more bytes than 4 x max_doc_chars has more characters than that too.
  opt.corpus.max_document_bytes = std::max<int64_t>(
      o.corpus.max_document_bytes, 4 * std::max<int64_t>(1, o.filters.max_doc_chars));
  const std::vector<CorpusFile> files = expand_inputs(o.inputs, o.corpus.format);
  const std::vector<CorpusFile> units = split_into_units(files, o.range_bytes);
  const auto n_units = static_cast<int64_t>(units.size());
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  STRATA_CHECK(!ec && fs::is_directory(o.out_dir), "cannot create data folder '", o.out_dir,
               "': ", ec.message());
  const PrepareWork work(o.out_dir, job_description(opt, units), o.worker);
  PrepareReport mine;  // what this process did
  mine.complete = false;
  mine.files = static_cast<int64_t>(files.size());
  mine.units = n_units;
  mine.workers = o.workers;
  mine.worker = o.worker;
  mine.stage = o.stage;
  // A record of this worker's found done: work an interrupted run finished.
  auto reuse = [&](const std::string& record) {
    if (!PrepareWork::done(record)) return false;
    if (mine.reused++ == 0) log::info("prepare: resuming from the records in ", work.dir());
    return true;
  };
  const bool all = o.stage == PrepareStage::all;
  auto is_mine = [&](int64_t i) { return i % o.workers == o.worker; };
  std::vector<std::string> scans, encodes;  // the records of each unit's stages
  std::vector<UnitFiles> unit_files;
  for (int64_t u = 0; u < n_units; ++u) {
    unit_files.push_back({work.scan(u), work.sample(u), work.docs(u), work.removed(u)});
    scans.push_back(unit_files.back().scan);
    encodes.push_back(work.encode(u));
  }

  // ---- scan ------------------------------------------------------------------------------------
  if (all || o.stage == PrepareStage::scan) {
    // Each unit's own sample gets twice its share of the budget (by input bytes): enough, unless
    // the units differ a lot, for the global sample's texts to come from them (prepare_plan.cc).
    int64_t total_bytes = 0;
    for (const CorpusFile& u : units) total_bytes += unit_bytes(u);
    std::vector<int64_t> pending;
    for (int64_t u = 0; u < n_units; ++u)
      if (is_mine(u) && !reuse(scans[u])) pending.push_back(u);
    for_each_unit(pending, [&](int64_t u) {
      const CorpusFile& unit = units[static_cast<size_t>(u)];
      const double share = static_cast<double>(unit_bytes(unit)) /
                           static_cast<double>(std::max<int64_t>(1, total_bytes));
      const int64_t floor = std::min<int64_t>(int64_t{64} << 10, o.tokenizer_sample_bytes / 16);
      const auto budget = std::min<int64_t>(
          o.tokenizer_sample_bytes,
          floor +
              static_cast<int64_t>(2.0 * share * static_cast<double>(o.tokenizer_sample_bytes)));
      const UnitScan scan = scan_unit(opt, unit, budget, unit_files[static_cast<size_t>(u)]);
      scan.save(scans[u]);
      log::debug("prepare: scanned unit ", u + 1, "/", n_units, " (", unit.path, ") in ",
                 scan.seconds, " s");
    });
    mine.units_scanned = static_cast<int64_t>(pending.size());
    release_free_memory();
    if (o.stage == PrepareStage::scan) {
      mine.seconds = seconds_since(t0);
      return mine;
    }
  }

  // ---- plan ------------------------------------------------------------------------------------
  if (all)
    PrepareWork::wait_for(scans, "unit scans");
  else
    PrepareWork::require(scans, "plan");
  if ((all && o.worker == 0) || o.stage == PrepareStage::plan) {
    if (!reuse(work.plan())) {
      Plan plan = make_plan(opt, units, unit_files, work.sort_dir());
      plan.report.files = mine.files;
      plan.report.units = n_units;
      plan.save(work.plan());
      release_free_memory();
    }
    if (o.stage == PrepareStage::plan) {
      mine.seconds = seconds_since(t0);
      return mine;
    }
  }
  if (all)
    PrepareWork::wait_for({work.plan()}, "plan");
  else
    PrepareWork::require({work.plan()}, cat(enum_name(o.stage)));
  const Plan plan = Plan::load(work.plan());

  // ---- encode ----------------------------------------------------------------------------------
  if (all || o.stage == PrepareStage::encode) {
    std::vector<int64_t> pending;
    for (int64_t u = 0; u < n_units; ++u)
      if (is_mine(u) && !reuse(encodes[u])) pending.push_back(u);
    std::optional<Tokenizer> tok;
    if (!pending.empty())
      tok = Tokenizer::load((fs::path(o.out_dir) / "tokenizer.json").string(), o.eot_token);
    for_each_unit(pending, [&](int64_t u) {
      const CorpusFile& unit = units[static_cast<size_t>(u)];
      const UnitTokens t = encode_unit(opt, *tok, unit, u, unit_files[static_cast<size_t>(u)], plan,
                                       work.tokens(u, "train"), work.tokens(u, "val"));
      t.save(encodes[u]);
      log::debug("prepare: encoded unit ", u + 1, "/", n_units, " (", unit.path, ") in ", t.seconds,
                 " s");
    });
    mine.units_encoded = static_cast<int64_t>(pending.size());
    if (o.stage == PrepareStage::encode) {
      mine.seconds = seconds_since(t0);
      return mine;
    }
  }

  // ---- assemble --------------------------------------------------------------------------------
  if (all)
    PrepareWork::wait_for(encodes, "unit encodings");
  else
    PrepareWork::require(encodes, "assemble");
  PrepareReport report = plan.report;
  std::map<std::string, std::vector<int64_t>> unit_tokens;
  std::map<std::string, std::vector<std::string>> token_files;
  for (int64_t u = 0; u < n_units; ++u) {
    const UnitTokens t = UnitTokens::load(encodes[u]);
    report.scan_seconds += t.scan_seconds;
    report.encode_seconds += t.seconds;
    report.train.add(t.train.bytes, t.train.documents);
    report.val.add(t.val.bytes, t.val.documents);
    report.train_tokens += t.train_tokens;
    report.val_tokens += t.val_tokens;
    unit_tokens["train"].push_back(t.train_tokens);
    unit_tokens["val"].push_back(t.val_tokens);
    token_files["train"].push_back(work.tokens(u, "train"));
    token_files["val"].push_back(work.tokens(u, "val"));
  }
  // Every shard of both splits, numbered across them for the workers to share.
  std::vector<std::pair<std::string, int64_t>> shards;
  for (const auto& [split, tokens] :
       {std::pair{"train", report.train_tokens}, std::pair{"val", report.val_tokens}})
    for (int64_t k = 0; k * o.max_shard_tokens < tokens; ++k) shards.emplace_back(split, k);
  std::vector<std::string> shard_records;
  for (const auto& [split, k] : shards) shard_records.push_back(work.shard(split, k));
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!is_mine(static_cast<int64_t>(i)) || reuse(shard_records[i])) continue;
    const auto& [split, k] = shards[i];
    save_shard_entry(shard_records[i], assemble_shard(opt, split, k, report.vocab_size,
                                                      token_files[split], unit_tokens[split]));
    ++mine.shards_written;
  }
  if (o.worker != 0) {
    write_file_atomic(work.finished(o.worker), std::to_string(mine.reused));
    mine.seconds = seconds_since(t0);
    return mine;
  }
  PrepareWork::wait_for(shard_records, "shards");
  Manifest manifest;
  manifest.vocab_size = report.vocab_size;
  manifest.splits["train"];
  manifest.splits["val"];
  for (size_t i = 0; i < shards.size(); ++i)
    manifest.splits[shards[i].first].push_back(load_shard_entry(shard_records[i]));
  // A loader without a manifest globs <split>_*.bin, so shards of a larger earlier run must go.
  for (const auto& [split, entries] : manifest.splits)
    for (const std::string& path : list_shards(o.out_dir, split)) {
      const std::string name = fs::path(path).filename().string();
      if (std::none_of(entries.begin(), entries.end(),
                       [&](const ShardEntry& e) { return e.file == name; }))
        fs::remove(path);
    }
  remove_stale_temporaries(o.out_dir);
  report.train_shards = static_cast<int64_t>(manifest.splits["train"].size());
  report.val_shards = static_cast<int64_t>(manifest.splits["val"].size());
  report.workers = o.workers;
  std::vector<std::string> finished;
  for (int w = 1; w < o.workers; ++w) finished.push_back(work.finished(w));
  PrepareWork::wait_for(finished, "workers to finish");
  report.reused = mine.reused;
  for (const std::string& f : finished) report.reused += std::stoll(read_file(f));
  report.seconds = seconds_since(t0);
  write_manifest(o.out_dir, manifest);  // a folder with a manifest is complete
  write_file_atomic((fs::path(o.out_dir) / "prepare_report.json").string(),
                    report.to_json().dump(2) + "\n");
  work.remove();
  return report;
}

PrepareReport prepare_text(const std::vector<std::string>& text_files, const std::string& out_dir,
                           int64_t vocab_size, double val_fraction, uint64_t seed,
                           const std::string& document_separator, const FilterConfig& filters,
                           DedupMode dedup) {
  STRATA_CHECK(!text_files.empty(), "data.text lists no text files to prepare");
  PrepareOptions o;
  o.inputs = text_files;
  o.out_dir = out_dir;
  o.vocab_size = vocab_size;
  o.val_fraction = val_fraction;
  o.seed = seed;
  o.corpus.format = CorpusFormat::text;
  o.corpus.document_separator = document_separator;
  o.filters = filters;
  o.dedup = dedup;
  return prepare(o);
}

}  // namespace strata::data
