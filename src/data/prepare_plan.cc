// The plan stage (prepare_stages.h): the corpus-wide decisions, made in corpus order from the
// units' scans, so that they are the same whatever the workers that scanned.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/log.h"
#include "data/corpus_dedup.h"
#include "data/doc_rows.h"
#include "data/file_util.h"
#include "data/prepare_record.h"
#include "data/prepare_stages.h"
#include "data/tokenizer.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

DocStats& removed_by(PrepareReport& r, Verdict v) {
  switch (v) {
    case Verdict::invalid_utf8:
      return r.invalid_utf8;
    case Verdict::too_short:
      return r.too_short;
    case Verdict::too_long:
      return r.too_long;
    case Verdict::repetitive:
      return r.repetitive;
    case Verdict::nonprint:
      return r.nonprint;
    case Verdict::duplicate:
      return r.duplicate;
    case Verdict::near_duplicate:
      return r.near_duplicate;
    case Verdict::kept:
      break;
  }
  return r.kept;
}

// The texts of the unit's documents at `indices` (ascending; indices among all its documents),
// read from the unit itself: for a sample document the unit's own sample did not keep.
std::map<int64_t, std::string> read_documents(const PrepareOptions& o, const CorpusFile& unit,
                                              const std::vector<int64_t>& indices) {
  std::map<int64_t, std::string> out;
  BadRecords bad(1.0);  // the scan judged the records already
  int64_t i = 0;
  size_t next = 0;
  read_batches(unit, o.corpus, o.batch_bytes, bad, [&](const DocBatch& batch) {
    for (const DocBatch::Doc& d : batch.docs) {
      if (next < indices.size() && indices[next] == i) {
        out[i] = std::string(batch.view(d));
        ++next;
      }
      ++i;
    }
  });
  STRATA_CHECK(next == indices.size(), "prepare: '", unit.path,
               "' changed while it was prepared (it has fewer documents than its scan saw)");
  return out;
}

// A kept document's place: its corpus-wide ordinal, its unit and index among the unit's documents.
struct Place {
  int64_t ordinal = -1, unit = -1, doc = -1;
  double draw = 0;
};

}  // namespace

void Plan::save(const std::string& path) const {
  RecordWriter w;
  w.put<uint64_t>(units.size());
  for (const UnitPlan& u : units) w.put(u);
  w.put(kept);
  w.put(forced_val);
  w.put(forced_train);
  w.put_string(report.to_json().dump());
  write_file_atomic(path, w.bytes());
}

Plan Plan::load(const std::string& path) {
  RecordReader r(read_file(path), path);
  Plan p;
  p.units.resize(r.get<uint64_t>());
  for (UnitPlan& u : p.units) u = r.get<UnitPlan>();
  p.kept = r.get<int64_t>();
  p.forced_val = r.get<int64_t>();
  p.forced_train = r.get<int64_t>();
  p.report = PrepareReport::from_json(nlohmann::json::parse(r.get_string()));
  return p;
}

namespace {

// The document indices of a unit's kept documents `kept` (ascending indices among them).
std::vector<int64_t> documents_of_kept(const UnitFiles& files, int bands,
                                       const std::vector<int64_t>& kept) {
  std::vector<int64_t> out;
  DocRowReader rows(files.docs, bands);
  DocRow row;
  int64_t i = 0, j = 0;
  while (out.size() < kept.size() && rows.next(row)) {
    if (row.verdict == Verdict::kept && j++ == kept[out.size()]) out.push_back(i);
    ++i;
  }
  STRATA_CHECK(out.size() == kept.size(), "prepare: '", files.docs,
               "' has fewer kept documents than the plan expects; remove the folder's .prepare "
               "subfolder and run again");
  return out;
}

// Every kept document's keys into the deduplication's sorts, numbered in corpus order.
void add_keys(CorpusDedup& dups, const std::vector<UnitFiles>& files, int bands) {
  std::vector<uint64_t> band_keys(static_cast<size_t>(bands));
  int64_t doc = 0;
  for (const UnitFiles& f : files) {
    DocRowReader rows(f.docs, bands);
    DocRow row;
    while (rows.next(row, band_keys.data())) {
      if (row.verdict != Verdict::kept) continue;
      dups.add_exact(row.key, doc);
      if (row.has_bands) dups.add_bands(band_keys.data(), band_keys.size(), doc);
      ++doc;
    }
  }
}

void clear_folder(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  STRATA_CHECK(!ec, "prepare: cannot create '", dir, "': ", ec.message());
}

}  // namespace

Plan make_plan(const PrepareOptions& o, const std::vector<CorpusFile>& units,
               const std::vector<UnitFiles>& files, const std::string& sort_dir) {
  Plan plan;
  PrepareReport& r = plan.report;
  const bool dedup = o.dedup != DedupMode::none;
  const int bands = o.dedup == DedupMode::minhash ? o.minhash.bands : 0;
  const bool train_tokenizer = o.tokenizer.empty();
  std::optional<CorpusDedup> dups;
  if (dedup) {
    clear_folder(sort_dir);
    dups.emplace(sort_dir, o.dedup_memory_bytes);
    add_keys(*dups, files, bands);
    dups->finish();
  }
  BadRecords bad(o.corpus.max_bad_fraction);
  Sample sample(o.tokenizer_sample_bytes);
  std::vector<std::vector<SampleEntry>> candidates(units.size());  // each unit's own sample
  int64_t n_val = 0, filtered = 0;  // filtered: documents the filters kept, corpus-wide
  Place lowest, highest;            // the kept documents with the extreme draws
  lowest.draw = 2;
  highest.draw = -1;
  for (size_t u = 0; u < units.size(); ++u) {
    UnitScan s = UnitScan::load(files[u].scan);
    bad.merge(s.bad, s.records, s.bad_examples);
    UnitPlan& up = plan.units.emplace_back();
    up.first_ordinal = plan.kept;
    StreamWriter removed(files[u].removed);
    DocRowReader rows(files[u].docs, bands);
    DocRow row;
    int64_t i = -1, j = -1;  // the index among the unit's documents, and among those kept
    while (rows.next(row)) {
      ++i;
      const int64_t bytes = row.bytes;
      r.seen.add(bytes);
      if (row.verdict != Verdict::kept) {
        removed_by(r, row.verdict).add(bytes);
        continue;
      }
      ++j;
      const Verdict v = dups ? dups->verdict(filtered) : Verdict::kept;
      ++filtered;
      if (v != Verdict::kept) {
        removed.put(Removed{i, v});
        ++up.removed;
        removed_by(r, v).add(bytes);
        continue;
      }
      r.kept.add(bytes);
      const Place place{plan.kept++, static_cast<int64_t>(u), i, row.draw};
      n_val += place.draw < o.val_fraction;
      if (place.draw < lowest.draw) lowest = place;
      if (place.draw > highest.draw) highest = place;
      if (train_tokenizer && place.draw >= o.val_fraction) {
        SampleEntry e;
        e.hash = row.hash;
        e.ordinal = place.ordinal;
        e.bytes = bytes;
        e.unit = static_cast<int64_t>(u);
        e.index = j;
        sample.offer(e, {});
      }
    }
    STRATA_CHECK(i + 1 == s.documents && j + 1 == s.kept, "prepare: '", files[u].docs,
                 "' does not match its scan record; remove the folder's .prepare subfolder and "
                 "run again");
    removed.commit();
    candidates[u] = std::move(s.sample);
  }
  if (dups) {
    dups.reset();  // removes its run files
    std::error_code ec;
    fs::remove_all(sort_dir, ec);
  }
  bad.check();
  r.bad_records = bad.count();
  r.records = bad.records();
  r.bad_examples = bad.examples();
  STRATA_CHECK(plan.kept > 0, "prepare: all ", r.seen.documents, " documents of ", units.size(),
               " unit(s) were removed (invalid_utf8 ", r.invalid_utf8.documents, ", too_short ",
               r.too_short.documents, ", too_long ", r.too_long.documents, ", repetitive ",
               r.repetitive.documents, ", nonprint ", r.nonprint.documents, ", duplicate ",
               r.duplicate.documents, ", near_duplicate ", r.near_duplicate.documents,
               "); check the separator (now ", nlohmann::json(o.corpus.document_separator).dump(),
               "), the JSON field (now '", o.corpus.field, "') and the filters");
  // With two or more documents and a non-zero fraction, both splits get at least one.
  if (plan.kept >= 2 && o.val_fraction > 0) {
    if (n_val == 0) plan.forced_val = lowest.ordinal;
    if (n_val == plan.kept) plan.forced_train = highest.ordinal;
  }

  // ---- the tokenizer ---------------------------------------------------------------------------
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tokenizer_file = (fs::path(o.out_dir) / "tokenizer.json").string();
  std::optional<Tokenizer> tok;
  if (train_tokenizer) {
    std::vector<std::string> docs;
    if (plan.forced_train >= 0) {  // every document went to validation: train on the one moved
      docs.push_back(std::move(
          read_documents(o, units[static_cast<size_t>(highest.unit)], {highest.doc})[highest.doc]));
    } else {
      std::vector<std::pair<SampleEntry, std::string>> chosen = sample.take();
      // The texts: from each unit's own sample, or, for a unit whose sample lacks one of them,
      // from the unit itself.
      size_t a = 0;
      while (a < chosen.size()) {
        const int64_t u = chosen[a].first.unit;
        size_t b = a;
        while (b < chosen.size() && chosen[b].first.unit == u) ++b;
        const std::vector<SampleEntry>& own = candidates[static_cast<size_t>(u)];
        std::ifstream texts;           // the unit's sample texts, read at the offsets wanted
        std::vector<int64_t> missing;  // indices among the kept documents
        for (size_t c = a; c < b; ++c) {
          auto it = std::lower_bound(
              own.begin(), own.end(), chosen[c].first.index,
              [](const SampleEntry& e, int64_t index) { return e.ordinal < index; });
          if (it == own.end() || it->ordinal != chosen[c].first.index) {
            missing.push_back(chosen[c].first.index);
            continue;
          }
          if (!texts.is_open()) texts.open(files[static_cast<size_t>(u)].sample, std::ios::binary);
          std::string& text = chosen[c].second;
          text.resize(static_cast<size_t>(it->bytes));
          texts.seekg(it->offset);
          texts.read(text.data(), it->bytes);
          STRATA_CHECK(texts.good(), "prepare: '", files[static_cast<size_t>(u)].sample,
                       "' is shorter than its scan says; remove the folder's .prepare subfolder "
                       "and run again");
        }
        if (!missing.empty()) {
          ++r.tokenizer_sample_rereads;
          const std::vector<int64_t> docs_of_missing =
              documents_of_kept(files[static_cast<size_t>(u)], bands, missing);
          std::map<int64_t, std::string> read =
              read_documents(o, units[static_cast<size_t>(u)], docs_of_missing);
          size_t m = 0;  // chosen[a, b) and missing are both in kept-index order
          for (size_t c = a; c < b && m < missing.size(); ++c)
            if (chosen[c].first.index == missing[m])
              chosen[c].second = std::move(read[docs_of_missing[m++]]);
        }
        a = b;
      }
      for (auto& [entry, text] : chosen)
        if (entry.ordinal != plan.forced_val) docs.push_back(std::move(text));
    }
    for (const std::string& d : docs) r.tokenizer_sample.add(static_cast<int64_t>(d.size()));
    tok = Tokenizer::train(docs, o.vocab_size);
    tok->save(tokenizer_file);
  } else {
    tok = Tokenizer::load(o.tokenizer, o.eot_token);
    r.tokenizer = o.tokenizer;
    // The file itself, byte for byte (the loader and transformers read it as it was).
    if (!fs::exists(tokenizer_file) || !fs::equivalent(o.tokenizer, tokenizer_file))
      write_file_atomic(tokenizer_file, read_file(o.tokenizer));
  }
  r.tokenizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.vocab_size = tok->vocab_size();
  return plan;
}

}  // namespace strata::data
