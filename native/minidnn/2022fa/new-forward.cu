// The course's GPU skeleton (2022fa interface). Left as it is, it writes nothing and the project stops at the
// first convolution with one line saying so.
#include <cmath>
#include <iostream>
#include "gpu-new-forward.h"

__global__ void conv_forward_kernel(float *output, const float *input, const float *mask, const int Batch,
                                    const int Map_out, const int Channel, const int Height, const int Width,
                                    const int K)
{
    /*
    Implement the forward convolution of the textbook's convolution chapter, one more dimension in front for the
    mini-batch. Here the goal is to be correct AND fast.

    output - output, input - input, mask - convolution kernel (weights)
    Batch - images in the batch, Map_out - output feature maps, Channel - input feature maps
    Height x Width - input size, K x K - kernel size
    */
    const int Height_out = Height - K + 1;
    const int Width_out = Width - K + 1;
    (void)Height_out;  // silences "declared but never referenced": delete once you use it
    (void)Width_out;

    // Index helpers: use them, or write your own. Example: float a = in_4d(0, 0, 0, 0); out_4d(0, 0, 0, 0) = a;
    #define out_4d(i3, i2, i1, i0) \
        output[(i3) * (Map_out * Height_out * Width_out) + (i2) * (Height_out * Width_out) + (i1) * (Width_out) + i0]
    #define in_4d(i3, i2, i1, i0) \
        input[(i3) * (Channel * Height * Width) + (i2) * (Height * Width) + (i1) * (Width) + i0]
    #define mask_4d(i3, i2, i1, i0) \
        mask[(i3) * (Channel * K * K) + (i2) * (K * K) + (i1) * (K) + i0]

    // Your GPU convolution kernel goes here.

    #undef out_4d
    #undef in_4d
    #undef mask_4d
}


__host__ void GPUInterface::conv_forward_gpu_prolog(const float *host_output, const float *host_input,
                                                    const float *host_mask, float **device_output_ptr,
                                                    float **device_input_ptr, float **device_mask_ptr, const int Batch,
                                                    const int Map_out, const int Channel, const int Height,
                                                    const int Width, const int K)
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


__host__ void GPUInterface::conv_forward_gpu(float *device_output, const float *device_input, const float *device_mask,
                                             const int Batch, const int Map_out, const int Channel, const int Height,
                                             const int Width, const int K)
{
    // Choose the grid and block sizes and launch the kernel.

}


__host__ void GPUInterface::conv_forward_gpu_epilog(float *host_output, float *device_output, float *device_input,
                                                    float *device_mask, const int Batch, const int Map_out,
                                                    const int Channel, const int Height, const int Width, const int K)
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
