// tinykern: one CUDA kernel behind a plain C ABI, so the package needs no torch.
#include <cuda_runtime.h>

#define SPARKBAKE_STR2(x) #x
#define SPARKBAKE_STR(x) SPARKBAKE_STR2(x)

__global__ void scale_kernel(float* values, int count, float factor) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        values[i] = values[i] * factor;
    }
}

extern "C" {

// The device architectures nvcc compiled this library for, e.g. "1210".
const char* tinykern_archs(void) {
#ifdef __CUDA_ARCH_LIST__
    return SPARKBAKE_STR(__CUDA_ARCH_LIST__);
#else
    return "";
#endif
}

// Number of visible CUDA devices; 0 when no driver or no device is present.
int sparkbake_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        return 0;
    }
    return count;
}

// Scales count floats on the device; returns a cudaError_t value (0 on success).
int tinykern_scale(float* host_values, int count, float factor) {
    float* device_values = nullptr;
    size_t bytes = sizeof(float) * (size_t)count;
    cudaError_t status = cudaMalloc(&device_values, bytes);
    if (status != cudaSuccess) return (int)status;
    cudaMemcpy(device_values, host_values, bytes, cudaMemcpyHostToDevice);
    scale_kernel<<<(count + 255) / 256, 256>>>(device_values, count, factor);
    // A launch fails without stopping the copies: a GPU this library has no code for
    // (cudaErrorNoKernelImageForDevice) would otherwise hand the values back unscaled.
    status = cudaGetLastError();
    if (status == cudaSuccess) {
        status = cudaMemcpy(host_values, device_values, bytes, cudaMemcpyDeviceToHost);
    }
    cudaFree(device_values);
    return (int)status;
}

// The CUDA runtime's name for an error value, e.g. "cudaErrorNoKernelImageForDevice".
const char* tinykern_error_name(int status) {
    return cudaGetErrorName((cudaError_t)status);
}

// ... and its text, e.g. "no kernel image is available for execution on the device".
const char* tinykern_error_string(int status) {
    return cudaGetErrorString((cudaError_t)status);
}

}  // extern "C"
