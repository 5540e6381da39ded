#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"

namespace strata {

std::vector<int32_t> generate(Decoder& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token) {
  STRATA_CHECK(!prompt.empty(), "generate: the prompt must contain at least one token");
  const int64_t v = model.config().vocab_size, window = model.seq_len();
  const int64_t drawable = options.vocab_limit > 0 ? std::min(options.vocab_limit, v) : v;
  const CounterRng rng(options.seed, hash_name("sample"));
  std::vector<int32_t> tokens = prompt;
  std::vector<float> probs(static_cast<size_t>(v)), last(static_cast<size_t>(v));
  std::vector<int32_t> order(static_cast<size_t>(v));
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t t = std::min<int64_t>(window, static_cast<int64_t>(tokens.size()));
    model.forward(tokens.data() + tokens.size() - t, nullptr, 1, t);
    // The last position's logits, from the model's device.
    model.backend().copy_to_host(last.data(), model.logits() + (t - 1) * v,
                                 static_cast<size_t>(v) * sizeof(float));
    const float* logits = last.data();
    int32_t next = 0;
    if (options.temperature <= 0.0f) {
      next = static_cast<int32_t>(std::max_element(logits, logits + drawable) - logits);
    } else {
      // Keep the top-k logits, softmax them at the temperature, draw one by inverse CDF.
      std::iota(order.begin(), order.begin() + drawable, 0);
      const int64_t k = options.top_k > 0 ? std::min(options.top_k, drawable) : drawable;
      std::partial_sort(order.begin(), order.begin() + k, order.begin() + drawable,
                        [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      const float top = logits[order[0]];
      double total = 0;
      for (int64_t j = 0; j < k; ++j) {
        probs[j] = std::exp((logits[order[j]] - top) / options.temperature);
        total += probs[j];
      }
      double u = rng.uniform(static_cast<uint64_t>(i)) * total;
      next = order[k - 1];
      for (int64_t j = 0; j < k; ++j) {
        u -= probs[j];
        if (u <= 0) {
          next = order[j];
          break;
        }
      }
    }
    tokens.push_back(next);
    if (on_token) on_token(next);
    if (next == options.stop_token) break;
  }
  return tokens;
}

}  // namespace strata
