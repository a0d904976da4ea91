// oneshot: one CUDA kernel with a static initializer, the library nvcc builds in one step.
#include <cuda_runtime.h>

__global__ void add_kernel(float* values, int count, float term) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        values[i] += term;
    }
}

extern "C" int oneshot_add(float* device_values, int count, float term) {
    add_kernel<<<(count + 255) / 256, 256>>>(device_values, count, term);
    return (int)cudaGetLastError();
}
