// sample_token (sampling.hpp): one sort of the ids by logit, then the kept prefix's mass.
#include "src/train/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace mpitron {

int sample_token(const float* logits, int V, double temperature, int top_k, double top_p, float u) {
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return idx[0];
  int keep = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> prob(keep);
  double total = 0;
  for (int i = 0; i < keep; ++i)
    total += prob[i] = std::exp((logits[idx[i]] - logits[idx[0]]) / temperature);
  double cum = 0;
  int cut = keep;
  for (int i = 0; i < keep; ++i) {
    cum += prob[i] / total;
    if (cum >= top_p) {
      cut = i + 1;
      break;
    }
  }
  double mass = std::accumulate(prob.begin(), prob.begin() + cut, 0.0);
  double r = u * mass;
  for (int i = 0; i < cut; ++i) {
    if (r < prob[i]) return idx[i];
    r -= prob[i];
  }
  return idx[cut - 1];
}

}  // namespace mpitron
