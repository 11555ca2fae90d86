// The framework's matrixMultiplyShared (matmul.h): one MATMUL_TILE_WIDTH^2 output tile per block, both operands
// staged through shared memory one tile of the inner dimension at a time. Compiled beside a student's file only
// when that file includes matmul.h (a file that brings its own copy, as some editions' matmul-unroll.cu did,
// would otherwise define the kernel twice).
#include "matmul.h"

__global__ void matrixMultiplyShared(const float *A, const float *B, float *C, int numARows, int numAColumns,
                                     int numBRows, int numBColumns, int numCRows, int numCColumns) {
  __shared__ float a_tile[MATMUL_TILE_WIDTH][MATMUL_TILE_WIDTH];
  __shared__ float b_tile[MATMUL_TILE_WIDTH][MATMUL_TILE_WIDTH];
  const int row = blockIdx.y * MATMUL_TILE_WIDTH + threadIdx.y;
  const int col = blockIdx.x * MATMUL_TILE_WIDTH + threadIdx.x;
  float sum = 0.0f;
  for (int t = 0; t < (numAColumns + MATMUL_TILE_WIDTH - 1) / MATMUL_TILE_WIDTH; ++t) {
    const int a_col = t * MATMUL_TILE_WIDTH + threadIdx.x;
    const int b_row = t * MATMUL_TILE_WIDTH + threadIdx.y;
    // size_t: the unrolled input of a full batch exceeds 2^31 elements.
    a_tile[threadIdx.y][threadIdx.x] = row < numARows && a_col < numAColumns ? A[size_t(row) * numAColumns + a_col] : 0;
    b_tile[threadIdx.y][threadIdx.x] = b_row < numBRows && col < numBColumns ? B[size_t(b_row) * numBColumns + col] : 0;
    __syncthreads();
    for (int i = 0; i < MATMUL_TILE_WIDTH; ++i) sum += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
    __syncthreads();
  }
  if (row < numCRows && col < numCColumns) C[size_t(row) * numCColumns + col] = sum;
}
