// The course's CPU skeleton (2022fa interface). Left as it is, conv_forward_cpu writes nothing and the project
// stops at the first convolution with one line saying so.
#include "cpu-new-forward.h"

void conv_forward_cpu(float *output, const float *input, const float *mask, const int Batch, const int Map_out,
                      const int Channel, const int Height, const int Width, const int K)
{
    /*
    Implement the forward convolution of the textbook's convolution chapter. The book's code handles one image;
    these arrays hold a whole mini-batch, one more dimension in front. Here the goal is to be correct, not fast.

    output - output, input - input, mask - convolution kernel (weights)
    Batch - images in the batch, Map_out - output feature maps, Channel - input feature maps
    Height x Width - input size, K x K - kernel size
    */
    const int Height_out = Height - K + 1;
    const int Width_out = Width - K + 1;

    // Index helpers: use them, or write your own.
    #define out_4d(i3, i2, i1, i0) \
        output[(i3) * (Map_out * Height_out * Width_out) + (i2) * (Height_out * Width_out) + (i1) * (Width_out) + i0]
    #define in_4d(i3, i2, i1, i0) \
        input[(i3) * (Channel * Height * Width) + (i2) * (Height * Width) + (i1) * (Width) + i0]
    #define mask_4d(i3, i2, i1, i0) \
        mask[(i3) * (Channel * K * K) + (i2) * (K * K) + (i1) * (K) + i0]

    // Your CPU convolution goes here.

    #undef out_4d
    #undef in_4d
    #undef mask_4d
}
