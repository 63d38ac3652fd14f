// The Llama forward of TINYLLAMA.md written from scratch in fp64, without the
// runtime's ops: what the CPU backend's forward (ReferenceForwardTest) and its
// gradients (TrainingTest, by central differences) are checked against.
#pragma once

#include "models/LlamaConfig.h"

#include <tlc/Weights.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace tlc::reference {

using Matrix = std::vector<double>;  // row-major
using Parameters = std::map<std::string, Matrix>;  // by checkpoint key

inline Parameters toDouble(const Weights &weights) {
  Parameters parameters;
  for (const auto &[key, tensor] : weights.all()) parameters[key] = Matrix(tensor.data.begin(), tensor.data.end());
  return parameters;
}

// y[rows, out] = x[rows, in] · W[out, in]ᵀ
inline Matrix project(const Matrix &x, const Matrix &w, int64_t rows, int64_t in, int64_t out) {
  Matrix y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
      y[r * out + o] = sum;
    }
  return y;
}

inline Matrix rmsnorm(const Matrix &x, const Matrix &gain, int64_t rows, int64_t width, double eps) {
  Matrix y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (int64_t i = 0; i < width; ++i) squares += x[r * width + i] * x[r * width + i];
    double inv = 1.0 / std::sqrt(squares / width + eps);
    for (int64_t i = 0; i < width; ++i) y[r * width + i] = x[r * width + i] * inv * gain[i];
  }
  return y;
}

// In place on [B, S, heads, D] stored as rows of B*S tokens.
inline void rope(Matrix &x, int64_t batch, int64_t seq, int64_t heads, int64_t dim, double theta, bool adjacent) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        double *v = &x[((b * seq + s) * heads + h) * dim];
        for (int64_t i = 0; i < dim / 2; ++i) {
          double angle = s * std::pow(theta, -2.0 * i / dim);
          int64_t first = adjacent ? 2 * i : i, second = adjacent ? 2 * i + 1 : i + dim / 2;
          double a = v[first], c = v[second];
          v[first] = a * std::cos(angle) - c * std::sin(angle);
          v[second] = a * std::sin(angle) + c * std::cos(angle);
        }
      }
}

struct Forward {
  Matrix logits;
  double loss;
};

inline Forward forward(const LlamaConfig &c, const Parameters &parameters, const std::vector<int32_t> &ids,
                       int64_t batch, int64_t seq) {
  auto w = [&](const std::string &key) -> const Matrix & { return parameters.at(key); };
  const int64_t T = batch * seq, H = c.heads, Hkv = c.kvHeads, D = c.headDim, W = c.hidden;
  const Matrix &embed = w("model.embed_tokens.weight");
  Matrix x(T * W);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < W; ++i) x[t * W + i] = embed[ids[t] * W + i];

  for (int64_t l = 0; l < c.layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    Matrix h = rmsnorm(x, w(p + "input_layernorm.weight"), T, W, c.eps);
    Matrix q = project(h, w(p + "self_attn.q_proj.weight"), T, W, H * D);
    Matrix k = project(h, w(p + "self_attn.k_proj.weight"), T, W, Hkv * D);
    Matrix v = project(h, w(p + "self_attn.v_proj.weight"), T, W, Hkv * D);
    rope(q, batch, seq, H, D, c.ropeTheta, c.ropeStyle == "adjacent");
    rope(k, batch, seq, Hkv, D, c.ropeTheta, c.ropeStyle == "adjacent");
    Matrix attn(T * H * D, 0.0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t head = 0; head < H; ++head) {
        int64_t kvHead = head / (H / Hkv);
        for (int64_t i = 0; i < seq; ++i) {
          std::vector<double> scores(i + 1);
          double maxScore = -INFINITY;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += q[((b * seq + i) * H + head) * D + d] * k[((b * seq + j) * Hkv + kvHead) * D + d];
            scores[j] = dot / std::sqrt(double(D));
            maxScore = std::max(maxScore, scores[j]);
          }
          double total = 0;
          for (double &s : scores) total += (s = std::exp(s - maxScore));
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t d = 0; d < D; ++d)
              attn[((b * seq + i) * H + head) * D + d] += scores[j] / total * v[((b * seq + j) * Hkv + kvHead) * D + d];
        }
      }
    Matrix o = project(attn, w(p + "self_attn.o_proj.weight"), T, H * D, W);
    for (int64_t i = 0; i < T * W; ++i) x[i] += o[i];

    h = rmsnorm(x, w(p + "post_attention_layernorm.weight"), T, W, c.eps);
    Matrix gate = project(h, w(p + "mlp.gate_proj.weight"), T, W, c.ffn);
    Matrix up = project(h, w(p + "mlp.up_proj.weight"), T, W, c.ffn);
    for (int64_t i = 0; i < T * c.ffn; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    Matrix down = project(gate, w(p + "mlp.down_proj.weight"), T, c.ffn, W);
    for (int64_t i = 0; i < T * W; ++i) x[i] += down[i];
  }
  x = rmsnorm(x, w("model.norm.weight"), T, W, c.eps);
  Forward result;
  result.logits = project(x, c.tiedEmbedding ? embed : w("lm_head.weight"), T, W, c.vocab);
  double loss = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s + 1 < seq; ++s) {
      const double *row = &result.logits[(b * seq + s) * c.vocab];
      double maxLogit = *std::max_element(row, row + c.vocab), total = 0;
      for (int64_t i = 0; i < c.vocab; ++i) total += std::exp(row[i] - maxLogit);
      loss += maxLogit + std::log(total) - row[ids[b * seq + s + 1]];
    }
  result.loss = loss / double(batch * (seq - 1));
  return result;
}

// ||out - ref|| / ||ref||, in fp64.
inline double relativeErrorTo(const std::vector<float> &out, const Matrix &ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

} // namespace tlc::reference
