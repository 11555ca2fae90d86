// The framework's tiled matrix multiplication, which the unrolled convolution (unroll-new-forward.cu) launches
// and students were told not to modify. Defined in matmul.cu beside this header.
#ifndef LAYER_CUSTOM_MATMUL_H
#define LAYER_CUSTOM_MATMUL_H

#include <cuda_runtime.h>

#define MATMUL_TILE_WIDTH 16

// C[numCRows][numCColumns] = A[numARows][numAColumns] * B[numBRows][numBColumns], row-major.
__global__ void matrixMultiplyShared(const float *A, const float *B, float *C, int numARows, int numAColumns,
                                     int numBRows, int numBColumns, int numCRows, int numCColumns);

#endif  // LAYER_CUSTOM_MATMUL_H
