// The course's CPU skeleton (2020fa interface). Left as it is, conv_forward_cpu writes nothing and the project
// stops at the first convolution with one line saying so.
#include "cpu-new-forward.h"

void conv_forward_cpu(float *y, const float *x, const float *k, const int B, const int M, const int C, const int H,
                      const int W, const int K)
{
    /*
    Implement the forward convolution of the textbook's convolution chapter. The book's code handles one image;
    these arrays hold a whole mini-batch, one more dimension in front. Here the goal is to be correct, not fast.

    y - output, x - input, k - convolution kernel (weights)
    B - images in the batch, M - output feature maps, C - input feature maps
    H x W - input size, K x K - kernel size
    */
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;

    // Index helpers: use them, or write your own.
    #define y4d(i3, i2, i1, i0) \
        y[(i3) * (M * H_out * W_out) + (i2) * (H_out * W_out) + (i1) * (W_out) + i0]
    #define x4d(i3, i2, i1, i0) \
        x[(i3) * (C * H * W) + (i2) * (H * W) + (i1) * (W) + i0]
    #define k4d(i3, i2, i1, i0) \
        k[(i3) * (C * K * K) + (i2) * (K * K) + (i1) * (K) + i0]

    // Your CPU convolution goes here.

    #undef y4d
    #undef x4d
    #undef k4d
}
