// Document masking of packed sequences (data.document_mask, model/context_attention.h): a packed
// micro-batch trains exactly as its documents would, each run alone as its own sequence:
// attention within the document, positions restarting at its first token (RoPE, and gpt2's
// learned positions). Checked on the summed token losses and on every parameter gradient. Also
// the sequence split of context parallelism (ContextSplit) and the document starts.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "model/context_attention.h"
#include "model/decoder.h"

namespace strata {
namespace {

constexpr int32_t kEos = 3;
constexpr int64_t kT = 24;

ModelConfig model(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = family == ModelFamily::gpt2 ? 0 : 2;
  if (family == ModelFamily::qwen3) c.attn_head_dim = 12;
  c.d_model = 64;
  c.vocab_size = 101;
  c.max_seq_len = kT;
  c.tie_embeddings = family == ModelFamily::gpt2;
  c.attention = AttentionKernel::flash;
  return c;
}

// Two packed sequences of kT tokens: documents of the given lengths, each ending with kEos but
// the last (cut off by the sequence end, as packing does); other tokens never kEos.
struct Packed {
  std::vector<std::vector<int64_t>> docs = {{7, 10, 7}, {1, 5, 18}};
  std::vector<int32_t> inputs, targets;
};

Packed packed() {
  Packed p;
  std::mt19937 rng(11);
  for (const auto& lengths : p.docs) {
    EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), int64_t{0}), kT);
    for (size_t d = 0; d < lengths.size(); ++d) {
      for (int64_t i = 0; i < lengths[d]; ++i) {
        int32_t tok = static_cast<int32_t>(4 + rng() % 97u);
        if (i == lengths[d] - 1 && d + 1 < lengths.size()) tok = kEos;
        p.inputs.push_back(tok);
        p.targets.push_back(static_cast<int32_t>(rng() % 101u));
      }
    }
  }
  return p;
}

std::vector<float> grads_of(const Decoder& m) {
  const ParamStore& ps = m.params();
  std::vector<float> out;
  for (const ParamInfo& info : ps.all()) {
    const float* g = ps.grad(ps.index_of(info.name));
    out.insert(out.end(), g, g + info.numel);
  }
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct Result {
  double loss_sum = 0;
  std::vector<float> grads;
};

// The packed micro-batch in one Decoder, with or without document masking.
Result run_packed(const ModelConfig& c, const Packed& p, bool mask) {
  Arena arena;
  DecoderOptions o;
  o.context.document_mask = mask;
  Decoder m(c, arena, 2, kT, o);
  m.init(5);
  m.params().zero_grads();
  std::vector<int32_t> starts(2 * kT);
  document_starts(starts.data(), p.inputs.data(), 2, kT, kEos);
  const double mean = m.forward_backward(p.inputs.data(), p.targets.data(), 1.0f, 0,
                                         mask ? starts.data() : nullptr);
  return {mean * 2 * kT, grads_of(m)};
}

// Every document alone: a Decoder of its length, the same initial parameters; losses and
// gradients summed over the documents.
Result run_documents(const ModelConfig& c, const Packed& p) {
  Result r;
  int64_t offset = 0;
  for (const auto& lengths : p.docs) {
    for (int64_t len : lengths) {
      Arena arena;
      Decoder m(c, arena, 1, len);
      m.init(5);
      m.params().zero_grads();
      const double mean =
          m.forward_backward(p.inputs.data() + offset, p.targets.data() + offset, 1.0f);
      r.loss_sum += mean * static_cast<double>(len);
      const std::vector<float> g = grads_of(m);
      if (r.grads.empty()) r.grads.assign(g.size(), 0.0f);
      for (size_t i = 0; i < g.size(); ++i) r.grads[i] += g[i];
      offset += len;
    }
  }
  return r;
}

class DocumentMask : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(DocumentMask, PackedSequencesTrainAsTheirDocumentsAlone) {
  const ModelConfig c = model(GetParam());
  const Packed p = packed();
  const Result want = run_documents(c, p);
  const Result got = run_packed(c, p, /*mask=*/true);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum));
  ASSERT_EQ(got.grads.size(), want.grads.size());
  const double e = rel_l2(got.grads, want.grads);
  std::printf("[ docmask ] %s: gradients %.1e (relative L2)\n", family_name(c.family), e);
  EXPECT_LE(e, 1e-5);
  // The check can fail: without the mask the documents see each other and their positions run on.
  const Result unmasked = run_packed(c, p, /*mask=*/false);
  EXPECT_GT(rel_l2(unmasked.grads, want.grads), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, DocumentMask,
                         ::testing::Values(ModelFamily::gpt2, ModelFamily::llama,
                                           ModelFamily::qwen3),
                         [](const auto& param_info) {
                           return std::string(family_name(param_info.param));
                         });

TEST(DocumentStarts, RestartAfterEachEndOfDocumentToken) {
  const std::vector<int32_t> tokens = {5, kEos, 6, 7, kEos, kEos, 8, 9};
  std::vector<int32_t> starts(tokens.size());
  document_starts(starts.data(), tokens.data(), 2, 4, kEos);  // two sequences of 4
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0, 2, 2, 0, 1, 2, 2}));
}

// Rank r holds chunks r and 2cp-1-r; every position belongs to exactly one rank; rows_before
// counts a rank's rows below a position (what the ring's key ranges are made of).
TEST(ContextSplit, ChunksAreLoadBalancedAndCoverTheSequence) {
  for (int cp : {1, 2, 3, 4}) {
    const ContextSplit s{48, cp};
    std::vector<int> owner(48, -1);
    for (int r = 0; r < cp; ++r) {
      int64_t causal_work = 0;
      for (int64_t i = 0; i < s.local(); ++i) {
        const int64_t p = s.global_row(i, r);
        ASSERT_EQ(owner[p], -1) << "cp " << cp << " position " << p;
        owner[p] = r;
        if (i > 0) {
          EXPECT_GT(p, s.global_row(i - 1, r));  // increasing: ranges are contiguous
        }
        causal_work += p + 1;
      }
      // Every rank attends over the same number of (query, key) pairs.
      EXPECT_EQ(causal_work * cp, 48 * 49 / 2) << "cp " << cp << " rank " << r;
      for (int64_t p = 0; p <= 48; ++p) {
        int64_t below = 0;
        for (int64_t i = 0; i < s.local(); ++i) below += s.global_row(i, r) < p;
        EXPECT_EQ(s.rows_before(p, r), below) << "cp " << cp << " rank " << r << " p " << p;
      }
    }
    for (int o : owner) EXPECT_GE(o, 0);
  }
}

}  // namespace
}  // namespace strata
