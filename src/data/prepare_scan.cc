// The scan stage (prepare_stages.h): one unit's documents judged by the filters, and what the plan
// needs of the ones they keep.
#include <algorithm>
#include <chrono>

#include "data/doc_rows.h"
#include "data/file_util.h"
#include "data/minhash.h"
#include "data/prepare_record.h"
#include "data/prepare_stages.h"
#include "io/atomic_file.h"

namespace strata::data {

void read_batches(const CorpusFile& unit, const CorpusOptions& corpus, int64_t batch_bytes,
                  BadRecords& bad, const std::function<void(const DocBatch&)>& fn) {
  DocBatch batch;
  auto flush = [&] {
    if (!batch.docs.empty()) fn(batch);
    batch.text.clear();
    batch.docs.clear();
  };
  const std::unique_ptr<DocumentReader> reader = open_documents(unit, corpus, bad);
  Document doc;
  while (reader->next(doc)) {
    DocBatch::Doc d;
    d.begin = batch.text.size();
    d.size = doc.text.size();
    d.oversize = doc.oversize_bytes;
    batch.text.append(doc.text);
    batch.docs.push_back(d);
    if (static_cast<int64_t>(batch.text.size()) >= batch_bytes) flush();
  }
  flush();
}

void Sample::offer(const SampleEntry& entry, std::string_view text) {
  if (entry.hash >= threshold_) return;
  heap_.push({entry, std::string(text)});
  bytes_ += entry.bytes;
  // Over budget: remove from the top, and with it every document of the same hash (duplicates).
  while (!heap_.empty() && (bytes_ > budget_ || heap_.top().entry.hash >= threshold_)) {
    threshold_ = std::min(threshold_, heap_.top().entry.hash);
    bytes_ -= heap_.top().entry.bytes;
    heap_.pop();
  }
}

std::vector<std::pair<SampleEntry, std::string>> Sample::take() {
  std::vector<std::pair<SampleEntry, std::string>> all;
  while (!heap_.empty()) {
    Item& top = const_cast<Item&>(heap_.top());
    all.emplace_back(top.entry, std::move(top.text));
    heap_.pop();
  }
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.first.ordinal < b.first.ordinal; });
  bytes_ = 0;
  return all;
}

double sample_hash(std::string_view doc, uint64_t seed) {
  return split_draw(doc, seed ^ 0x7a3c5e1f9b2d4086ull);
}

void UnitScan::save(const std::string& path) const {
  RecordWriter w;
  w.put(documents);
  w.put(kept);
  w.put_vector(sample);
  w.put(bad);
  w.put(records);
  w.put_strings(bad_examples);
  w.put(seconds);
  write_file_atomic(path, w.bytes());
}

UnitScan UnitScan::load(const std::string& path) {
  RecordReader r(read_file(path), path);
  UnitScan s;
  s.documents = r.get<int64_t>();
  s.kept = r.get<int64_t>();
  s.sample = r.get_vector<SampleEntry>();
  s.bad = r.get<int64_t>();
  s.records = r.get<int64_t>();
  s.bad_examples = r.get_strings();
  s.seconds = r.get<double>();
  return s;
}

UnitScan scan_unit(const PrepareOptions& o, const CorpusFile& unit, int64_t sample_budget,
                   const UnitFiles& files) {
  const auto t0 = std::chrono::steady_clock::now();
  UnitScan scan;
  const bool dedup = o.dedup != DedupMode::none, minhash = o.dedup == DedupMode::minhash;
  const MinHasher hasher(o.minhash);
  const int n_bands = minhash ? o.minhash.bands : 0;
  Sample sample(sample_budget);
  const bool sampling = o.tokenizer.empty();
  BadRecords bad(o.corpus.max_bad_fraction);
  DocRowWriter rows(files.docs, n_bands);
  std::vector<Verdict> verdicts;
  std::vector<DocKey> keys;
  std::vector<std::vector<uint64_t>> bands;
  read_batches(unit, o.corpus, o.batch_bytes, bad, [&](const DocBatch& batch) {
    const auto n = static_cast<int64_t>(batch.docs.size());
    verdicts.assign(batch.docs.size(), Verdict::kept);
    keys.assign(dedup ? batch.docs.size() : 0, DocKey{});
    bands.resize(minhash ? batch.docs.size() : 0);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      const DocBatch::Doc& d = batch.docs[k];
      verdicts[k] = d.oversize > 0 ? Verdict::too_long : judge_document(batch.view(d), o.filters);
      if (verdicts[k] != Verdict::kept) continue;
      if (dedup) keys[k] = dedup_key(batch.view(d));
      if (minhash) hasher.band_keys(batch.view(d), bands[k]);
    }
    for (size_t k = 0; k < batch.docs.size(); ++k) {
      const DocBatch::Doc& d = batch.docs[k];
      DocRow row;
      row.bytes = batch.bytes(d);
      row.verdict = verdicts[k];
      ++scan.documents;
      if (row.verdict != Verdict::kept) {
        rows.add(row, nullptr);
        continue;
      }
      const std::string_view text = batch.view(d);
      const int64_t ordinal = scan.kept++;
      row.draw = split_draw(text, o.seed);
      if (dedup) row.key = keys[k];
      const uint64_t* band_keys = nullptr;
      if (minhash && !bands[k].empty()) {
        row.has_bands = 1;
        band_keys = bands[k].data();
      }
      if (sampling) row.hash = sample_hash(text, o.seed);
      rows.add(row, band_keys);
      if (sampling && row.draw >= o.val_fraction) {
        SampleEntry entry;
        entry.hash = row.hash;
        entry.ordinal = ordinal;
        entry.bytes = static_cast<int64_t>(d.size);
        sample.offer(entry, text);
      }
    }
  });
  rows.commit();
  scan.bad = bad.count();
  scan.records = bad.records();
  scan.bad_examples = bad.examples();
  // The sample's texts, one after another in ordinal order; the entries say where.
  io::AtomicWriter texts(files.sample);
  for (auto& [entry, text] : sample.take()) {
    entry.offset = static_cast<int64_t>(texts.bytes_written());
    texts.write(text);
    std::string().swap(text);  // freed as written: the sample is held once, not twice
    scan.sample.push_back(entry);
  }
  texts.commit();
  scan.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return scan;
}

}  // namespace strata::data
