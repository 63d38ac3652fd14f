// The ranges of the tl ops' float attributes, enforced by the dialect's verifier and by
// the runtime's Program validator alike. GPU kernels compute in f32, so a value must
// make sense there as well as in the CPU reference's f64: finite, and not a denormal
// that f32 kernels flush to zero.
#pragma once

#include <cfloat>
#include <cmath>

namespace tlc {

// rmsnorm eps: a positive normal f32, so 1 / sqrt(mean(x^2) + eps) is finite for x = 0.
inline bool isValidEps(double eps) { return eps >= FLT_MIN && eps <= FLT_MAX; }
constexpr const char *kEpsRange = "a positive normal f32 (1.2e-38 to 3.4e38)";

// rope theta: at least 1 and finite in f32, so theta^(-2i/D) lies in (0, 1]; a tiny
// theta overflows it to infinity.
inline bool isValidRopeTheta(double theta) { return theta >= 1 && theta <= FLT_MAX; }
constexpr const char *kRopeThetaRange = "at least 1 and finite in f32 (at most 3.4e38)";

// Scale factors (tl.scale, flash attention's scale): zero or a normal f32.
inline bool isValidScale(double factor) {
  double magnitude = std::fabs(factor);
  return factor == 0 || (magnitude >= FLT_MIN && magnitude <= FLT_MAX);
}
constexpr const char *kScaleRange = "zero or a normal f32 (magnitude 1.2e-38 to 3.4e38)";

} // namespace tlc

namespace tlc {

// AdamW (tl.adamw): a learning rate, eps and gradient-norm bound that are positive
// normal f32; betas in [0, 1) so the bias corrections 1 - beta^t are positive; a
// weight decay that is zero or a positive normal f32.
inline bool isValidPositive(double value) { return value >= FLT_MIN && value <= FLT_MAX; }
constexpr const char *kPositiveRange = "a positive normal f32 (1.2e-38 to 3.4e38)";
inline bool isValidBeta(double beta) { return beta >= 0 && beta < 1; }
constexpr const char *kBetaRange = "in [0, 1)";
inline bool isValidWeightDecay(double decay) { return decay == 0 || isValidPositive(decay); }
constexpr const char *kWeightDecayRange = "zero or a positive normal f32";

} // namespace tlc
