// The course's CPU skeleton (2023fa interface). Left as it is, conv_forward_cpu writes nothing and the project
// stops at the first convolution with one line saying so.
#include "cpu-new-forward.h"

void conv_forward_cpu(float *output, const float *input, const float *mask, const int B, const int M, const int C,
                      const int H, const int W, const int K, const int S)
{
    /*
    Implement the forward convolution of the textbook's convolution chapter. The book's code handles one image;
    these arrays hold a whole mini-batch, one more dimension in front. Here the goal is to be correct, not fast.

    output - output, input - input, mask - convolution kernel (weights)
    B - images in the batch, M - output feature maps, C - input feature maps
    H x W - input size, K x K - kernel size, S - stride
    */
    const int H_out = (H - K)/S + 1;
    const int W_out = (W - K)/S + 1;

    // Index helpers: use them, or write your own.
    #define out_4d(i3, i2, i1, i0) \
        output[(i3) * (M * H_out * W_out) + (i2) * (H_out * W_out) + (i1) * (W_out) + i0]
    #define in_4d(i3, i2, i1, i0) \
        input[(i3) * (C * H * W) + (i2) * (H * W) + (i1) * (W) + i0]
    #define mask_4d(i3, i2, i1, i0) \
        mask[(i3) * (C * K * K) + (i2) * (K * K) + (i1) * (K) + i0]

    // Your CPU convolution goes here.

    #undef out_4d
    #undef in_4d
    #undef mask_4d
}
