// How the decoder's head picks a token, on each rank's slice of the vocabulary: greedy (the
// largest logit), or drawn from softmax(logits / temperature) by the Gumbel-max trick, from the
// whole vocabulary or its nucleus (top_p). A rank's pick travels as one int64 key (PackBest) that
// an allreduce(max) over the ranks turns into the global pick.
#ifndef DISCO_MODELS_LLAMA_SAMPLING_H_
#define DISCO_MODELS_LLAMA_SAMPLING_H_

#include <cstdint>

namespace llama {

/// Temperatures below this sample as greedy (vLLM's rule): logit / temperature would overflow to
/// infinity, and ties between infinities would pick the token, not the logits.
constexpr float kGreedyBelowTemperature = 1e-5f;

/// An order-preserving 64-bit key of (value, index): a larger value wins, then a smaller index
/// (numpy's argmax: the first maximum). Signed comparison of the keys orders them so.
int64_t PackBest(float value, int64_t index);
/// The index of a key.
int64_t UnpackIndex(int64_t key);

/// A uniform draw in (0, 1) that is a hash of (seed, position, token id): the Gumbel noise of each
/// token, the same on any rank and at any batch.
double Uniform(uint64_t seed, int64_t pos, int64_t id);

/// The key of the draw among the n logits at `row` (token ids start..start+n): the largest
/// logit / temperature + Gumbel noise of (seed, pos, id), over the tokens whose logit is at least
/// `floor` (-inf: all). None here: a key of -inf (another rank's wins).
int64_t SampleBest(const float* row, int64_t start, int64_t n, float temperature, uint64_t seed,
                   int64_t pos, float floor);

/// Nucleus sampling (top_p < 1), as transformers' TopPLogitsWarper: of the whole vocabulary's `v`
/// logits, the fewest likeliest tokens whose probabilities (softmax of logits / temperature) sum
/// to top_p or more; returns their least logit (tokens at or above it, ties included, are drawn
/// from). The likeliest are sorted first (64, then twice as many, while their sum falls short).
float NucleusFloor(const float* logits, int64_t v, float temperature, float top_p);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_SAMPLING_H_
