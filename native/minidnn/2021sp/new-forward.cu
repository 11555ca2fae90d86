// The course's GPU skeleton (2021sp interface). Left as it is, it writes nothing and the project stops at the
// first convolution with one line saying so.
#include <cmath>
#include <iostream>
#include "gpu-new-forward.h"

__global__ void conv_forward_kernel(float *y, const float *x, const float *k, const int B, const int M, const int C,
                                    const int H, const int W, const int K)
{
    /*
    Implement the forward convolution of the textbook's convolution chapter, one more dimension in front for the
    mini-batch. Here the goal is to be correct AND fast.

    y - output, x - input, k - convolution kernel (weights)
    B - images in the batch, M - output feature maps, C - input feature maps
    H x W - input size, K x K - kernel size
    */
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    (void)H_out;  // silences "declared but never referenced": delete once you use it
    (void)W_out;

    // Index helpers: use them, or write your own. Example: float a = x4d(0, 0, 0, 0); y4d(0, 0, 0, 0) = a;
    #define y4d(i3, i2, i1, i0) \
        y[(i3) * (M * H_out * W_out) + (i2) * (H_out * W_out) + (i1) * (W_out) + i0]
    #define x4d(i3, i2, i1, i0) \
        x[(i3) * (C * H * W) + (i2) * (H * W) + (i1) * (W) + i0]
    #define k4d(i3, i2, i1, i0) \
        k[(i3) * (C * K * K) + (i2) * (K * K) + (i1) * (K) + i0]

    // Your GPU convolution kernel goes here.

    #undef y4d
    #undef x4d
    #undef k4d
}


__host__ void GPUInterface::conv_forward_gpu_prolog(const float *host_y, const float *host_x, const float *host_k,
                                                    float **device_y_ptr, float **device_x_ptr, float **device_k_ptr,
                                                    const int B, const int M, const int C, const int H, const int W,
                                                    const int K)
{
    // Allocate device memory and copy the inputs to it. The pointers are passed by address so that you can set
    // them here; the other two functions receive them.

    // Checking for errors, for example:
    // cudaError_t error = cudaGetLastError();
    // if (error != cudaSuccess) {
    //     std::cout << "CUDA error: " << cudaGetErrorString(error) << std::endl;
    //     exit(-1);
    // }
}


__host__ void GPUInterface::conv_forward_gpu(float *device_y, const float *device_x, const float *device_k, const int B,
                                             const int M, const int C, const int H, const int W, const int K)
{
    // Choose the grid and block sizes and launch the kernel.

}


__host__ void GPUInterface::conv_forward_gpu_epilog(float *host_y, float *device_y, float *device_x, float *device_k,
                                                    const int B, const int M, const int C, const int H, const int W,
                                                    const int K)
{
    // Copy the output back to the host.

    // Free the device memory.

}


__host__ void GPUInterface::get_device_properties()
{
    int deviceCount;
    cudaGetDeviceCount(&deviceCount);
    for (int dev = 0; dev < deviceCount; dev++) {
        cudaDeviceProp deviceProp;
        cudaGetDeviceProperties(&deviceProp, dev);
        std::cout << "Device " << dev << " name: " << deviceProp.name << std::endl;
        std::cout << "Computational capabilities: " << deviceProp.major << "." << deviceProp.minor << std::endl;
        std::cout << "Max Global memory size: " << deviceProp.totalGlobalMem << std::endl;
        std::cout << "Max Constant memory size: " << deviceProp.totalConstMem << std::endl;
        std::cout << "Max Shared memory size per block: " << deviceProp.sharedMemPerBlock << std::endl;
        std::cout << "Max threads per block: " << deviceProp.maxThreadsPerBlock << std::endl;
        std::cout << "Max block dimensions: " << deviceProp.maxThreadsDim[0] << " x, " << deviceProp.maxThreadsDim[1]
                  << " y, " << deviceProp.maxThreadsDim[2] << " z" << std::endl;
        std::cout << "Max grid dimensions: " << deviceProp.maxGridSize[0] << " x, " << deviceProp.maxGridSize[1]
                  << " y, " << deviceProp.maxGridSize[2] << " z" << std::endl;
        std::cout << "Warp Size: " << deviceProp.warpSize << std::endl;
    }
}
