// The kernel writes tinydep's value; the host side exports a marker of all three inputs:
// tinydep's header, tinyconf's CMake project and the project's own toolchain file.
#include "tinydep.h"

#define SELFDRIVEN_STR2(x) #x
#define SELFDRIVEN_STR(x) SELFDRIVEN_STR2(x)

extern "C" __global__ void selfdriven_fill(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = TINYDEP_VALUE * SELFDRIVEN_SCALE + TINYCONF_VALUE;
}

extern "C" {
extern const char selfdriven_marker[];
__attribute__((used)) const char selfdriven_marker[] =
    TINYDEP_MARKER " conf " SELFDRIVEN_STR(TINYCONF_VALUE) " scale " SELFDRIVEN_STR(SELFDRIVEN_SCALE);
}
