// The kernel writes tinydep's value; the host side exports it and its marker string.
#include "tinydep.h"

extern "C" __global__ void tinycmake_fill(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = TINYDEP_VALUE;
}

extern "C" {
extern const char tinycmake_marker[];
__attribute__((used)) const char tinycmake_marker[] = TINYDEP_MARKER;
int tinycmake_value() { return TINYDEP_VALUE; }
}
