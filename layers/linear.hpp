// Fully connected layer, weights stored (out, in) as PyTorch's nn.Linear: out = inp W^T + b.
// Backward's input product and weight products may run as two calls (dweight and dbias nullptr,
// then dinp nullptr) with the bits of one: tensor parallelism overlaps a collective between them.
#pragma once

namespace mpitron::cpu {

template <class F>
void linear_forward(F* out,           // (N,OC)
                    const F* inp,     // (N,IC)
                    const F* weight,  // (OC,IC)
                    const F* bias,    // (OC) or nullptr
                    int N, int IC, int OC);

template <class F>
void linear_backward(F* dinp,          // (N,IC)  =, or nullptr to skip
                     F* dweight,       // (OC,IC) +=, or nullptr to skip
                     F* dbias,         // (OC)    +=, or nullptr
                     const F* dout,    // (N,OC)
                     const F* inp,     // (N,IC)
                     const F* weight,  // (OC,IC)
                     int N, int IC, int OC);

}  // namespace mpitron::cpu
