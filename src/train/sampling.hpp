// Drawing the next token from a language model's logits (mpitron generate): temperature, then
// top-k, then top-p (nucleus) filtering of the sorted distribution, as in Holtzman et al. 2019.
// Deterministic: the caller passes the uniform number, so a seed fixes the text.
#pragma once

namespace mpitron {

// The id drawn from logits[0, V): temperature <= 0 is greedy (an arg-max); top_k 0 keeps every
// id; top_p 1 keeps the whole mass. u in [0, 1) picks within the kept mass, most likely first.
int sample_token(const float* logits, int V, double temperature, int top_k, double top_p, float u);

}  // namespace mpitron
