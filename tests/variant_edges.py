"""Each GPU variant's edge cases, in one table (tests/test_gpu_variants.py runs them): the shapes where its index
maths, tiling or staging can go wrong, each checked against the reference; the shapes its supports() must accept
(host code: no GPU needed); what it must refuse, in one line; whether an input beyond FP16's range must reach its
outputs as inf or NaN (never a quietly wrong number); layers run in turn through a workspace it grows only; the
tolerance and precision its descriptor declares. Each entry's comment says what its shapes cover and why.

Every variant file of the ladder has its entry here or in a test parametrized over the descriptors (the fused
first-layer variants: test_gpu_fused_first_layer.py; every variant at random and course shapes: test_gpu_engine.py,
test_gpu_any_shape.py)."""

from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, int, int, int, int, int]  # (B, C, H, W, M, K)
SWEEP_SMALL_IMAGES = ((10000, 29, 29, 29, 19, 5), (10000, 26, 26, 26, 25, 5), (10000, 11, 31, 31, 27, 5))
SWEEP_LARGEST = ((10000, 15, 24, 24, 38, 7), (10000, 24, 46, 46, 64, 7), (10000, 32, 96, 96, 64, 7))
K4_REFUSED = "K = 4; its kernels are built for K = 1, 3, 5 and 7"


@dataclass(frozen=True)
class Refusal:
    shape: Shape
    says: str = ""  # the whole line after "<variant>: " ("" where only its kind is checked)
    contains: tuple[str, ...] = ()  # words the line must hold
    shared_memory: bool = True  # refused for shared memory: conv raises too, before any GPU work


@dataclass(frozen=True)
class Edges:
    seed: int
    shapes: tuple[Shape, ...]  # each must match the reference
    supported: tuple[Shape, ...] = ()  # supports() takes them
    supported_asks_the_gpu: bool = False  # its supports() asks the device (a Hopper GPU's wgmma code): GPU only
    refused: tuple[Refusal, ...] = ()
    fp16_channels: tuple[int, ...] = ()  # an input beyond 65504 in these channels: its outputs inf or NaN
    in_turn: tuple[Shape, ...] = ()  # run one after another: a workspace kept between calls, grown only
    rtol: float | None = None  # what the descriptor declares (None: not checked here)
    precision: str | None = None


EDGES: dict[str, Edges] = {
    # Step 17 (gpu-implicit-gemm-tiled) at the edges of its tiling: every channel tile it chooses (M from 1 to 130, so
    # 8, 16, 32 and 64 channels, and M past one tile), pixel counts that are not a multiple of any pixel tile, Ho*Wo % 4
    # != 0 (the scalar store path) and == 0 (float4 stores), reductions C*K*K shorter than one slice of 8 rows and not a
    # multiple of it, C = 1, K = 7 on a 7x7 image (one output pixel per image), and images smaller than a tile. Inputs
    # past 2^31 elements (64-bit indexing) are left to `invoke bench --sweep`, which checks images of every row at batch
    # 10000 (e.g. C=24 96x96: 2.2e9 elements) on the device; here they would take minutes of host reference time.
    "gpu-implicit-gemm-tiled": Edges(
        seed=1717,
        shapes=(
            (1, 1, 7, 7, 5, 7),        # one output pixel, C*K*K = 49
            (3, 1, 7, 7, 1, 7),        # M = 1
            (2, 1, 5, 5, 6, 3),        # C*K*K = 9: one full slice and one row
            (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
            (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
            (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9 (16-channel tile, 7 padded)
            (4, 5, 12, 12, 16, 5),     # 16 channels exactly
            (3, 6, 14, 13, 17, 5),     # M = 17: a 32-channel tile
            (2, 29, 29, 29, 19, 5),    # the sweep's worst row (s37), small batch
            (3, 11, 31, 31, 27, 5),
            (2, 32, 20, 20, 64, 3),    # 64 channels exactly, C*K*K = 288
            (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-channel tile holding one channel
            (1, 4, 10, 10, 130, 3),    # three 64-channel tiles
            (9, 8, 15, 15, 25, 3),
            (2, 24, 46, 46, 64, 7),    # s35 at batch 2: C*K*K = 1176
            (1, 1, 96, 96, 4, 3),      # 8836 pixels in one image
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
            (3, 33, 9, 9, 40, 1),      # K = 1, C past 32
        ),
    ),
    # Step 20 (gpu-split-f16): float32 accuracy from the FP16 tensor cores, where its index maths can go wrong: the
    # course's layers (sp19, sp18, fa19 conv2 with M = 24, fa18 conv2 with K = 7, fa17 conv1 with C = 1 and four
    # m-tiles), odd and even K (the last tap pair half empty or full), odd pixel columns (copy O of the planes), output
    # counts that are odd (scalar stores) or beyond one group of n-tiles, more images than persistent blocks, and each
    # depth of the staging ring (2, 1, and 0: the split reads global memory), even and odd W (the split's float2 or
    # float loads). Images too large for shared memory run in bands of output rows: one band or several, the last one
    # overlapping the one before, bands of a single row, W a multiple of 4 or not (16- or 4-byte staging copies), more
    # units (image, band) than persistent blocks. Held to the default float32 tolerance. An input beyond the FP16 range
    # must make the outputs it reaches non-finite (cuda/runtime/mma_f16.cuh), never quietly wrong; shapes whose weights
    # and a band of one output row do not fit in shared memory are refused with one line.
    "gpu-split-f16": Edges(
        seed=2020,
        shapes=(
            (3, 6, 22, 22, 16, 5),      # sp19 conv2 (two images in flight per block)
            (2, 6, 30, 30, 16, 5),      # sp18 conv2
            (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24 (two m-tiles per pass), n-tile groups loop, one image
                                        # in flight
            (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7, no room for staging (split from global memory)
            (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1, two passes of two m-tiles
            (2, 2, 100, 100, 5, 3),     # 9604 output pixels: n-tile groups loop over the image
            (1, 1, 7, 7, 5, 7),         # one output pixel
            (5, 5, 13, 11, 7, 3),       # 99 pixels: odd count, scalar stores
            (2, 3, 15, 16, 9, 7),
            (2, 4, 9, 7, 3, 1),         # K = 1: one tap, half of every pair empty
            (3, 3, 8, 9, 17, 2),        # K = 2: full pairs; M = 17
            (2, 2, 9, 10, 5, 4),        # K = 4
            (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four (two passes)
            (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks: each block walks several
            (2, 11, 38, 38, 19, 7),     # no room for staging, W even: the split's float2 loads from global memory
            # images whose split planes do not fit: bands of output rows
            (2, 29, 29, 29, 19, 5),     # the sweep's worst row (once refused): 5 bands of 5 rows
            (2, 8, 92, 92, 36, 5),      # 7 bands of 13 rows, the last overlapping 3 rows; M = 36: four m-tiles
            (2, 30, 89, 89, 24, 3),     # odd W: 4-byte staging copies, float split loads; odd Wo: scalar stores
            (2, 19, 77, 77, 5, 7),      # K = 7, M = 5: bands of 2 rows, the last overlapping
            (3, 64, 64, 64, 16, 3),     # bands of 1 row; W a multiple of 4: 16-byte staging copies
            (2, 15, 70, 70, 8, 3),      # W even, not a multiple of 4; the last band overlapping 2 rows
            (2, 22, 41, 41, 6, 5),      # M < 16, K = 5, odd W
            (300, 26, 32, 32, 8, 3),    # 600 units (2 bands per image): each block walks several through the ring
        ),
        supported=((10000, 6, 22, 22, 16, 5), (10000, 12, 33, 33, 24, 5), (10000, 12, 33, 33, 24, 7),
                   # shapes once refused because the split image did not fit (four from the bench sweep): now banded
                   (10000, 29, 29, 29, 19, 5), (10000, 64, 64, 64, 16, 3), (10000, 8, 92, 92, 36, 5),
                   (10000, 30, 94, 94, 29, 3), (10000, 16, 89, 89, 57, 5)),
        # weights too large for a block even beside a band of one output row
        refused=(Refusal((1, 32, 20, 20, 70, 7), contains=("split filters", "band of one output row")),
                 Refusal((1, 32, 96, 96, 64, 7), contains=("split filters", "band of one output row"))),
        fp16_channels=(2,), rtol=1e-4, precision="fp32",
    ),
    # Step 21 (gpu-split-f16-lean): step 20's arithmetic with separate hi/lo planes at a fixed distance, byte offsets,
    # bases hoisted out of the image loop and a packed split, checked where that can go wrong: every lo distance (16 to
    # 128 KB of hi planes), n-tiles per warp 1 to 4 and two m-tiles per pass, one n-tile group (bases computed once per
    # block) and several (computed per group), odd and even W and K (the split's runs of four columns and their zero
    # tail), the weights and staging ring in the gap before the lo planes or after them, each depth of the staging ring,
    # and more images than persistent blocks. Held to the default float32 tolerance; shapes that do not fit are refused
    # with one line. It shares step 20's arithmetic contract: float32 tolerance declared, inputs beyond FP16's range
    # reaching non-finite outputs, the course's layers supported.
    "gpu-split-f16-lean": Edges(
        seed=2021,
        shapes=(
            (3, 6, 22, 22, 16, 5),      # sp19 conv2: 41 n-tiles, 3 per warp, one group
            (2, 6, 30, 30, 16, 5),      # sp18 conv2: 85 n-tiles, 4 per warp, groups loop; lo planes at 32 KB
            (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24, two m-tiles per pass; lo at 64 KB, one image staged
            (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7; no room for staging (the split reads global memory)
            (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1, two passes of two m-tiles
            (1, 1, 7, 7, 5, 7),         # one output pixel
            (5, 5, 13, 11, 7, 3),       # 99 pixels: odd count, scalar stores
            (2, 3, 15, 16, 9, 7),
            (2, 4, 9, 7, 3, 1),         # K = 1
            (3, 3, 8, 9, 17, 2),        # K = 2, M = 17
            (2, 2, 9, 10, 5, 4),        # K = 4
            (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four
            (2, 2, 17, 19, 8, 3),       # n-tiles 1 and 2 per warp boundaries
            (2, 1, 48, 48, 6, 5),       # sp19 conv1's shape: weights and staging in the gap, lo at 32 KB
            (1, 14, 36, 36, 8, 3),      # hi planes ~79 KB: lo at 128 KB, weights in the gap, no staging
            (2, 2, 100, 100, 5, 3),     # 9604 output pixels: n-tile groups loop over the image; lo at 128 KB
            (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks
        ),
        supported=((10000, 6, 22, 22, 16, 5), (10000, 12, 33, 33, 24, 5), (10000, 12, 33, 33, 24, 7)),
        refused=(Refusal((1, 29, 29, 29, 19, 5)), Refusal((1, 64, 64, 64, 16, 3)), Refusal((1, 32, 20, 20, 70, 7))),
        fp16_channels=(2,), rtol=1e-4, precision="fp32",
    ),
    # Step 22 (gpu-tensor-core-tf32-lean): one TF32 pass from the staged image, rounded in place, checked where its
    # index maths can go wrong: one n-tile group (bases computed once per block) and several, n-tiles per warp 1 to 6
    # and two m-tiles per pass, both slots of the staging ring (more images than persistent blocks), odd pixel counts
    # (scalar stores), K = 1 to 7, padded taps past the depth. Held to its declared TF32 tolerance; shapes whose two
    # staged images and weights do not fit are refused with one line.
    "gpu-tensor-core-tf32-lean": Edges(
        seed=2022,
        shapes=(
            (3, 6, 22, 22, 16, 5),      # sp19 conv2: 41 n-tiles, 3 per warp, one group
            (2, 6, 30, 30, 16, 5),      # sp18 conv2: 85 n-tiles, 6 per warp, groups loop
            (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24, two m-tiles per pass
            (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7
            (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1, two passes of two m-tiles
            (1, 1, 7, 7, 5, 7),         # one output pixel
            (5, 5, 13, 11, 7, 3),       # 99 pixels: odd count, scalar stores
            (2, 3, 15, 16, 9, 7),
            (2, 4, 9, 7, 3, 1),         # K = 1: depth 4, half a k-step padded
            (3, 3, 8, 9, 17, 2),        # M = 17
            (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four
            (2, 2, 17, 19, 8, 3),
            (2, 8, 12, 12, 16, 5),      # 25 k-steps, one n-tile per warp
            (2, 29, 20, 20, 19, 5),     # C = 29: 91 k-steps, two m-tiles, 186 KB of shared memory
            (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks: both slots of the ring
        ),
        refused=(Refusal((1, 64, 64, 64, 16, 3)), Refusal((1, 32, 60, 60, 70, 7))),
        # one TF32 rounding per operand: held to step 13's 2e-3, counted as TF32 wherever precision is decided
        rtol=2e-3, precision="tf32",
    ),
    # Step 23 (gpu-tensor-core-f16): one FP16 pass from the image staged as channel-pair planes, checked where its index
    # maths can go wrong: even and odd C (a zero channel pads the last pair), one n-tile group and several, n-tiles per
    # warp 1 to 6 and two m-tiles per pass, both slots of the staging ring (more images than persistent blocks), odd
    # pixel counts (scalar stores), K = 1 to 7, padded pairs past the depth. Held to its declared reduced tolerance;
    # FP16's range (values beyond 65504 reach only non-finite outputs); shapes whose staging, pairs and weights do not
    # fit are refused with one line.
    "gpu-tensor-core-f16": Edges(
        seed=2023,
        shapes=(
            (3, 6, 22, 22, 16, 5),      # sp19 conv2: 75 pairs in 10 k-steps, 41 n-tiles, 6 per warp, one group
            (2, 6, 30, 30, 16, 5),      # sp18 conv2: 85 n-tiles, groups loop
            (2, 12, 33, 33, 24, 5),     # fa19 conv2: M = 24, two m-tiles per pass
            (2, 12, 33, 33, 24, 7),     # fa18 conv2: K = 7, 37 k-steps
            (3, 1, 28, 28, 50, 5),      # fa17 conv1: C = 1 (one pair, its second channel the zero pad), M = 50
            (1, 1, 7, 7, 5, 7),         # one output pixel
            (5, 5, 13, 11, 7, 3),       # C = 5 odd; 99 pixels: odd count, scalar stores
            (2, 3, 15, 16, 9, 7),       # C = 3
            (2, 4, 9, 7, 3, 1),         # K = 1: 2 pairs, most of a k-step padded
            (3, 3, 8, 9, 17, 2),        # M = 17
            (3, 3, 12, 13, 33, 3),      # M = 33: three m-tiles padded to four
            (2, 2, 17, 19, 8, 3),       # one pair
            (2, 8, 12, 12, 16, 5),      # 13 k-steps, one n-tile per warp
            (2, 29, 20, 20, 19, 5),     # C = 29: 375 pairs, 47 k-steps, two m-tiles
            (5000, 1, 6, 7, 2, 3),      # more images than persistent blocks: both slots of the ring
        ),
        refused=(Refusal((1, 64, 64, 64, 16, 3)), Refusal((1, 32, 60, 60, 70, 7))),
        # beyond 65504 in the low or the high half of a channel pair
        fp16_channels=(2, 3),
        # one FP16 rounding per operand (TF32's 11-bit significand): 2e-3, counted as reduced precision (fp16)
        rtol=2e-3, precision="fp16",
    ),
    # Step 25 (gpu-split-f16-igemm) at the edges of its tiling: every filter tile it chooses (M from 1 to 130, so 8, 16,
    # 24, 32, 48 and 64 filters, and M past one tile), pixel counts that are not a multiple of its 128-pixel tile, Ho*Wo
    # % 4 != 0 (scalar stores) and == 0 (float4 stores), depths C*K*K shorter than one 16-tap k-step, between one k-step
    # and a 32-tap chunk, and not a multiple of either, tiles that span many images, and the shapes the split-FP16 steps
    # 20 and 21 refuse (weights beyond shared memory). Inputs past 2^31 elements are left to `invoke bench --sweep`,
    # which checks every row at batch 10000 on the device. The FP16-range contract: an input beyond 65504 reaches its
    # outputs as inf or NaN, never as a wrong finite number.
    "gpu-split-f16-igemm": Edges(
        seed=2525,
        shapes=(
            (1, 1, 7, 7, 5, 7),        # one output pixel, C*K*K = 49: 4 k-steps, the last mostly padding
            (3, 1, 7, 7, 1, 7),        # M = 1
            (2, 1, 5, 5, 6, 3),        # C*K*K = 9: one k-step, part padding
            (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
            (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
            (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
            (4, 5, 12, 12, 16, 5),     # 16 filters exactly
            (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
            (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
            (3, 11, 31, 31, 27, 5),    # a 32-filter tile
            (2, 15, 24, 24, 38, 7),    # the sweep's s02 (split weights beyond steps 20/21's shared memory): 48 filters
            (2, 32, 20, 20, 64, 3),    # 64 filters exactly, C*K*K = 288
            (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-filter tile holding one filter
            (1, 4, 10, 10, 130, 3),    # three 64-filter tiles
            (9, 8, 15, 15, 25, 3),
            (2, 24, 46, 46, 64, 7),    # the sweep's s35 at batch 2: C*K*K = 1176
            (1, 1, 96, 96, 4, 3),      # 8836 pixels in one image
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
            (3, 33, 9, 9, 40, 1),      # K = 1, C*K*K = 33: one tap past a chunk
            (2, 28, 19, 19, 58, 5),    # the sweep's s21: 64 filters, 6 unused
        ),
        # the weights stream through shared memory a chunk at a time: the shapes steps 20 and 21 refuse run here
        supported=SWEEP_LARGEST,
        refused=(Refusal((1, 2000, 24, 24, 38, 7), shared_memory=False,
                         says="a depth of 98000 taps needs a tap table beyond 220 KB of shared memory"),),
        fp16_channels=(2,),
    ),
    # Step 26 (gpu-split-f16-nhwc) at the edges of what it adds to step 25: channel counts that pad to the next 8 (C =
    # 1, 3, 9, 29, 70) and several 8-channel groups per tap (C = 40), depths K*K*Cp that end inside a 32-deep chunk,
    # every filter tile (M from 1 to 130), pixel counts that are not a multiple of its 128-pixel tile, tiles that span
    # many images, and a batch cut into chunks of planes (images of 144 MB of planes: one per chunk). The FP16-range
    # contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number. Inputs past
    # 2^31 elements are left to `invoke bench --sweep`, which checks every row at batch 10000 on the device.
    "gpu-split-f16-nhwc": Edges(
        seed=2626,
        shapes=(
            (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 8: depth 392 in 13 chunks
            (3, 1, 7, 7, 1, 7),        # M = 1
            (2, 1, 5, 5, 6, 3),        # depth 72: the last chunk holds one group
            (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
            (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
            (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
            (4, 5, 12, 12, 16, 5),     # 16 filters exactly
            (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
            (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
            (3, 9, 31, 31, 27, 5),     # C = 9 pads to 16; a 32-filter tile
            (2, 15, 24, 24, 38, 7),    # the sweep's s02: 48 filters
            (2, 32, 20, 20, 64, 3),    # 64 filters exactly, Cp = 32: one tap per chunk
            (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-filter tile holding one filter
            (1, 4, 10, 10, 130, 3),    # three 64-filter tiles
            (2, 24, 46, 46, 64, 7),    # the sweep's s35 at batch 2
            (1, 40, 12, 12, 10, 3),    # C = 40: five groups per tap
            (2, 70, 9, 9, 12, 3),      # C = 70 pads to 72
            (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
            (3, 33, 9, 9, 40, 1),      # K = 1: depth 40, one group past a chunk
            (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
            (3, 16, 1500, 1500, 3, 1),  # 144 MB of planes per image: three chunks of one image
        ),
        supported=SWEEP_LARGEST,
        refused=(Refusal((1, 8000, 24, 24, 38, 7), shared_memory=False,
                         says="a depth of 392000 padded taps needs a tap table beyond 220 KB of shared memory"),),
        fp16_channels=(2,),
        in_turn=((6, 30, 40, 40, 46, 7), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 46, 7)),
    ),
    # Step 27 (gpu-split-f16-halo) at the edges of what it adds to step 26: channel counts that pad to the next 16 (C =
    # 1, 3, 9, 29, 70) and several 16-channel units (C = 40, 70: the slab double-buffered), K = 1 (no halo, the next
    # slab is the newest copy), tiles whose 128 pixels span one row or many (Wo from 1 to 148), cross one image boundary
    # or many (images of 4 pixels), every filter tile (M from 1 to 130), pixel counts that are not a multiple of 128,
    # and a batch cut into chunks of planes. The FP16-range contract: an input beyond 65504 reaches its outputs as inf
    # or NaN, never as a wrong finite number. Inputs past 2^31 elements are left to `invoke bench --sweep`, which checks
    # every row at batch 10000 on the device.
    "gpu-split-f16-halo": Edges(
        seed=2727,
        shapes=(
            (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 8: depth 392 in 13 chunks
            (3, 1, 7, 7, 1, 7),        # M = 1
            (2, 1, 5, 5, 6, 3),        # depth 72: the last chunk holds one group
            (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
            (7, 3, 9, 11, 7, 3),       # Ho*Wo = 63: scalar stores; rectangular image
            (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
            (4, 5, 12, 12, 16, 5),     # 16 filters exactly
            (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
            (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
            (3, 9, 31, 31, 27, 5),     # C = 9 pads to 16; a 32-filter tile
            (2, 15, 24, 24, 38, 7),    # the sweep's s02: 48 filters
            (2, 32, 20, 20, 64, 3),    # 64 filters exactly, Cp = 32: one tap per chunk
            (2, 7, 15, 15, 65, 3),     # M = 65: a second 64-filter tile holding one filter
            (1, 4, 10, 10, 130, 3),    # three 64-filter tiles
            (2, 24, 46, 46, 64, 7),    # the sweep's s35 at batch 2
            (1, 40, 12, 12, 10, 3),    # C = 40: five groups per tap
            (2, 70, 9, 9, 12, 3),      # C = 70 pads to 72
            (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles span many images
            (3, 33, 9, 9, 40, 1),      # K = 1: depth 40, one group past a chunk
            (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
            (3, 16, 1500, 150, 3, 1),  # 14 MB of planes per image, K = 1
            (25, 96, 200, 200, 4, 1),  # 15 MB per image, K = 1: the batch in two chunks
            (2, 2, 40, 3, 5, 3),       # Wo = 1: a tile spans 128 output rows
        ),
        # the sweep's small-image rows and its largest drawn shape (s00)
        supported=((10000, 29, 29, 29, 19, 5), (10000, 15, 24, 24, 38, 7), (10000, 26, 26, 26, 25, 5),
                   (10000, 11, 31, 31, 27, 5), (10000, 24, 46, 46, 64, 7), (10000, 30, 81, 81, 46, 7)),
        # the widest shape the sweep's ranges allow: 128 pixels of 90-pixel rows reach 15 input rows of 96 pixels,
        # 32 channels' slabs double-buffered beside 64 filters' weights
        refused=(Refusal((10000, 32, 96, 96, 64, 7), shared_memory=False,
                         says="a slab of 15 rows of 96 pixels and 64 filters' weights need 240 KB of shared memory "
                              "(limit 220 KB)"),),
        fp16_channels=(2,),
        in_turn=((6, 30, 40, 40, 46, 7), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 46, 7)),
    ),
    # Step 28 (gpu-split-f16-wgmma) at the edges of what it adds to step 27: channel counts that pad to 16 or to a
    # multiple of 32 (C = 1, 3, 9, 29) and several bands of 32 channels (C = 33, 40, 50, 70), K = 1 (no halo) to 7,
    # tiles of 128 flat positions that start at each image's first row or run on across images (images of 4 pixels: 32
    # to a tile), rows of one output pixel (Wo = 1), every filter tile (M from 1 to 32; the last warp's rows partly or
    # wholly unused), persistent blocks whose two warpgroups loop over many tiles, and a batch cut into chunks of
    # planes. The FP16-range contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite
    # number. Inputs past 2^31 elements are left to `invoke bench --sweep`, which checks every row at batch 10000 on the
    # device.
    "gpu-split-f16-wgmma": Edges(
        seed=2828,
        shapes=(
            (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 16
            (3, 1, 7, 7, 1, 7),        # M = 1: an 8-filter tile
            (2, 1, 5, 5, 6, 3),        # 3 x 3 outputs in a 5-wide flat grid
            (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
            (7, 3, 9, 11, 7, 3),       # rectangular image
            (1, 3, 3, 3, 9, 3),        # image = kernel, M = 9: a 16-filter tile
            (4, 5, 12, 12, 16, 5),     # 16 filters exactly
            (3, 6, 14, 13, 17, 5),     # M = 17: a 24-filter tile
            (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2
            (3, 9, 31, 31, 27, 5),     # C = 9 pads to 16; a 32-filter tile
            (2, 15, 24, 24, 30, 7),    # K = 7, C = 15 pads to 16
            (2, 32, 20, 20, 32, 3),    # 32 filters exactly, two k16 steps per tap
            (2, 7, 15, 15, 25, 3),     # M = 25: a 32-filter tile holding one filter of its last warp
            (3, 11, 31, 31, 27, 5),    # the sweep's s08 at batch 3
            (300, 26, 26, 26, 25, 5),  # the sweep's s17 at batch 300: 1800 tiles over the persistent blocks
            (1, 40, 12, 12, 10, 3),    # C = 40 pads to 64: two bands
            (2, 50, 9, 9, 12, 3),      # C = 50 pads to 64: two bands
            (2, 70, 9, 9, 12, 1),      # C = 70 pads to 96: three bands
            (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels: 150 tiles
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: one tile each, mostly never stored
            (3, 33, 9, 9, 20, 1),      # K = 1: no halo; C = 33 pads to 64: two bands of 32 channels
            (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
            (3, 16, 1500, 150, 3, 1),  # 14 MB of planes per image, K = 1
            (25, 96, 200, 200, 4, 1),  # 15 MB per image, K = 1: the batch in two chunks
            (2, 2, 40, 3, 5, 3),       # Wo = 1: a third of the flat grid is stored
        ),
        supported=SWEEP_SMALL_IMAGES, supported_asks_the_gpu=True,
        refused=(Refusal((2, 15, 24, 24, 38, 7), shared_memory=False,
                         says="M = 38 filters; at most 32 (8 per warp, hi and lo in its 16 accumulator rows)"),
                 # 32 channels of 96-pixel rows with K = 7: 128 positions reach 710 slab rows of 128 bytes
                 Refusal((2, 32, 96, 96, 32, 7), says="32 filters' weights (196 KB) and four slabs of 710 rows "
                                                      "(89 KB each) exceed 227 KB of shared memory"),
                 Refusal((2, 3, 12, 12, 8, 4), shared_memory=False, says=K4_REFUSED)),
        fp16_channels=(2,),
        in_turn=((6, 30, 40, 40, 26, 3), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 26, 3)),
    ),
    # Step 29 (gpu-split-f16-taps-wgmma) at the edges of what it adds to step 28: (filter, tap column) pairs as the
    # wgmma's rows, R = M x K of them over one or two warpgroups (R = 7, 64, 65, 126, 128 and the sweep's rows), more
    # than 128 in filter groups over the same slab (the last group with fewer filters, K = 1 to 7), in launches of as
    # many groups as shared memory holds the weights of, K = 1 (nothing to add up) to 7, tiles of 128 - (K - 1) stored
    # positions that start at each image's first row or run on across images, the epilogue adding K staged columns, rows
    # of one output pixel (Wo = 1), channel counts that pad to 16 or to several bands of 32, persistent blocks over many
    # tiles (each slab buffer's mbarrier through many phases), and a batch cut into chunks of planes. The FP16-range
    # contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number.
    "gpu-split-f16-taps-wgmma": Edges(
        seed=2929,
        shapes=(
            (1, 1, 7, 7, 5, 7),        # one output pixel, C = 1 padded to 16
            (3, 1, 7, 7, 1, 7),        # M = 1: R = 7
            (2, 1, 5, 5, 6, 3),        # 3 x 3 outputs in a 5-wide flat grid
            (5, 2, 4, 4, 3, 3),        # Ho*Wo = 4
            (7, 3, 9, 11, 7, 3),       # rectangular image
            (1, 3, 3, 3, 9, 3),        # image = kernel
            (2, 4, 10, 10, 64, 1),     # R = 64 exactly: one warpgroup, K = 1
            (3, 6, 14, 13, 13, 5),     # R = 65: a second warpgroup for one pair
            (2, 5, 12, 12, 128, 1),    # R = 128 exactly: two warpgroups
            (2, 6, 14, 14, 42, 3),     # R = 126
            (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2: R = 95
            (3, 9, 31, 31, 25, 5),     # C = 9 pads to 16; R = 125
            (2, 15, 24, 24, 18, 7),    # K = 7, C = 15 pads to 16; R = 126
            (2, 32, 20, 20, 32, 3),    # two k16 steps per kh
            (4, 11, 31, 31, 12, 5),    # R = 60: one warpgroup
            (300, 26, 26, 26, 25, 5),  # the sweep's s17 at batch 300: 1800 tiles over the persistent blocks
            (1, 40, 12, 12, 10, 3),    # C = 40 pads to 64: two bands
            (2, 50, 9, 9, 12, 3),      # C = 50 pads to 64: two bands
            (2, 70, 9, 9, 12, 1),      # C = 70 pads to 96: three bands
            (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles run on across images
            (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
            (3, 16, 1500, 150, 3, 1),  # 14 MB of planes per image, K = 1
            (25, 96, 200, 200, 4, 1),  # 15 MB per image, K = 1: the batch in two chunks
            (2, 2, 40, 3, 5, 3),       # Wo = 1: a third of the flat grid is stored
            (2, 11, 31, 31, 27, 5),    # the sweep's s08 at batch 2: 135 pairs, 3 groups of 9 filters
            (2, 15, 24, 24, 38, 7),    # 266 pairs: 5 groups of 8 filters, the last of 6
            (2, 8, 16, 16, 50, 3),     # 150 pairs: 3 groups, the last of 16 filters
            (2, 4, 12, 12, 129, 1),    # K = 1, 129 pairs: 3 groups of 43
            (3, 6, 10, 10, 64, 7),     # 448 pairs (the sweep's largest M x K): 4 groups of 16 filters, two
                                       # warpgroups each
            (60, 11, 31, 31, 27, 5),   # s08 at batch 60: every group over many tiles
            (3, 32, 12, 12, 40, 7),    # 5 groups of 8 filters, 56 KB of weights each: launches of 2, 2 and 1 groups
            # one slab buffer where two do not fit (the sweep's s07 and s35 shapes; persistent blocks over many tiles)
            (2, 29, 87, 87, 5, 7),     # s07: 650 slab rows of 128 bytes
            (3, 24, 46, 46, 64, 7),    # s35: 4 groups of 16 filters, one launch each
            (40, 26, 70, 70, 9, 7),    # 1 slab, 2 warpgroups, 1440 tiles over the blocks
            # each slab buffer's mbarrier through many phases (a block's tiles over two buffers), groups
            # between its uses
            (300, 26, 32, 32, 8, 3),   # the sweep's s16 at batch 300: 2100 tiles
            (37, 11, 31, 31, 27, 5),   # s08 at batch 37: 3 groups of 9 filters over 259 tiles
            (40, 26, 40, 40, 9, 7),    # 368 slab rows of 128 bytes: 480 tiles
        ),
        supported=SWEEP_SMALL_IMAGES, supported_asks_the_gpu=True,
        # 32 channels of 96-pixel rows with K = 7 and 18 filters: 704 slab rows of 128 bytes, and even one slab buffer
        # does not fit beside the weights and the staging area
        refused=(Refusal((2, 32, 96, 96, 18, 7), says="weights (112 KB), a slab of 704 rows (88 KB) and 126 staged "
                                                      "rows (66 KB) exceed 227 KB of shared memory"),
                 Refusal((2, 3, 12, 12, 8, 4), shared_memory=False, says=K4_REFUSED)),
        fp16_channels=(2,),
        in_turn=((6, 30, 40, 40, 26, 3), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 26, 3)),
    ),
    # Step 30 (gpu-split-f16-pairs-wgmma) at the edges of what it changes in step 29: 64 positions as the wgmma's M, two
    # warpgroups a tile, and the (filter, tap column) pairs as its N, padded to a multiple of 8 from 16 to 136 (every N
    # built: R = 7 to 136 and the sweep's rows), more than 136 pairs in filter groups over the same slab (the group
    # count chosen by its cost among those that fit shared memory: the sweep's s00, refused by step 29, runs in 4
    # groups), K = 1 to 7, tiles that start at each image's first row or run on across images, channel counts that pad
    # to 8 (two wgmmas a tap row: the slab's [x hi | x lo] rows against [w hi | 0] and [w lo | w hi]; where C <= 4, 8 /
    # C image rows stacked in a pixel's 8 channels, so K taps take ceil(K / rows) steps), to 16 or to several bands of
    # 32, one or two slab buffers, persistent blocks over many tiles, and a batch cut into chunks of planes. The
    # FP16-range contract: an input beyond 65504 reaches its outputs as inf or NaN, never as a wrong finite number.
    "gpu-split-f16-pairs-wgmma": Edges(
        seed=3030,
        shapes=(
            (3, 1, 7, 7, 1, 7),        # R = 7: N = 16, C = 1 padded to 16, one output pixel
            (5, 2, 4, 4, 3, 3),        # R = 9: N = 16, Ho*Wo = 4
            (2, 1, 5, 5, 6, 3),        # R = 18: N = 24, 3 x 3 outputs in a 5-wide flat grid
            (7, 3, 9, 11, 7, 3),       # R = 21: N = 24, a rectangular image
            (1, 3, 3, 3, 9, 3),        # R = 27: N = 32, image = kernel
            (1, 1, 7, 7, 5, 7),        # R = 35: N = 40
            (2, 3, 9, 9, 15, 3),       # R = 45: N = 48
            (2, 4, 10, 10, 52, 1),     # R = 52: N = 56, K = 1
            (4, 11, 31, 31, 12, 5),    # R = 60: N = 64
            (2, 4, 10, 10, 64, 1),     # R = 64: N = 64
            (3, 6, 14, 13, 13, 5),     # R = 65: N = 72
            (2, 5, 11, 11, 27, 3),     # R = 81: N = 88
            (2, 32, 20, 20, 32, 3),    # R = 96: N = 96, two k16 steps per kh
            (2, 29, 29, 29, 19, 5),    # the sweep's s37 at batch 2: R = 95, N = 96
            (2, 3, 47, 47, 32, 3),     # the sweep's s20 at batch 2: R = 96, C = 3 in a band of 8
            (2, 7, 29, 29, 19, 3),     # the sweep's s18 at batch 2: R = 57, N = 64, C = 7
            (2, 8, 20, 20, 17, 7),     # R = 119: N = 120, C = 8 fills a band of 8, K = 7
            (2, 4, 94, 94, 32, 5),     # the sweep's s11 at batch 2: 160 pairs, 2 groups of 16 filters, C = 4: 3 steps
            # image rows stacked where C <= 4: K taps in ceil(K / rows) steps of rows = min(K, 8 / C)
            (2, 3, 69, 69, 19, 3),     # the sweep's s15 at batch 2: C = 3, 2 rows a step: 2 steps
            (2, 4, 20, 20, 9, 7),      # C = 4, K = 7: 4 steps, the last half past the taps
            (3, 2, 15, 17, 11, 7),     # C = 2, K = 7: 4 rows a step, 2 steps
            (2, 2, 46, 46, 16, 5),     # the sweep's s36 at batch 2: C = 2, K = 5: 2 steps
            (2, 1, 12, 12, 8, 5),      # C = 1, K = 5: one step of 5 rows
            (4, 3, 5, 6, 4, 5),        # C = 3, K = 5 = H: 3 steps, the stacked rows past the image's last zero
            (2, 6, 13, 13, 34, 3),     # R = 102: N = 104
            (2, 6, 13, 13, 35, 3),     # R = 105: N = 112
            (2, 6, 13, 13, 39, 3),     # R = 117: N = 120
            (3, 9, 31, 31, 25, 5),     # R = 125: N = 128, C = 9 pads to 16 (the fewest channels a band of 16 takes)
            (2, 15, 24, 24, 18, 7),    # R = 126: N = 128, K = 7
            (2, 5, 12, 12, 128, 1),    # R = 128: N = 128
            (2, 11, 31, 31, 27, 5),    # the sweep's s08 at batch 2: R = 135, N = 136, one group
            (2, 5, 12, 12, 136, 1),    # R = 136: N = 136, the most a group holds
            (2, 4, 12, 12, 137, 1),    # 137 pairs: 2 groups of 69 filters, the last of 68
            (2, 15, 24, 24, 38, 7),    # 266 pairs: 2 groups of 19 filters
            (2, 8, 16, 16, 50, 3),     # 150 pairs: 2 groups of 25 filters
            (3, 6, 10, 10, 64, 7),     # 448 pairs (the sweep's largest M x K): 4 groups of 16 filters
            (3, 32, 12, 12, 40, 7),    # 280 pairs in 4 groups of 10 filters, 63 KB of weights each: launches of
                                       # 2 groups
            (300, 26, 26, 26, 25, 5),  # the sweep's s17 at batch 300: 1800 tiles over the persistent blocks
            (1, 40, 12, 12, 10, 3),    # C = 40 pads to 64: two bands
            (2, 50, 9, 9, 12, 3),      # C = 50 pads to 64: two bands
            (2, 70, 9, 9, 12, 1),      # C = 70 pads to 96: three bands
            (1, 2, 150, 130, 6, 3),    # a rectangular image of 19.5K pixels
            (257, 2, 6, 6, 8, 5),      # 257 images of 4 pixels: tiles run on across images
            (45, 32, 96, 96, 5, 3),    # 1.2 MB of planes per image
            (3, 16, 1500, 150, 3, 1),  # 14 MB of planes per image, K = 1
            (25, 96, 200, 200, 4, 1),  # 15 MB per image, K = 1: the batch in two chunks
            (2, 2, 40, 3, 5, 3),       # Wo = 1: a third of the flat grid is stored
            (60, 11, 31, 31, 27, 5),   # s08 at batch 60: persistent blocks over many tiles
            # wide slabs: one buffer where two do not fit; groups chosen by what fits
            (2, 29, 87, 87, 5, 7),     # s07: 650 slab rows of 128 bytes, two buffers beside 35 pairs' weights
            (3, 24, 46, 46, 64, 7),    # s35: 448 pairs, 4 groups of 16 filters, one buffer, a launch each
            (2, 30, 81, 81, 46, 7),    # s00: 322 pairs, 3 groups would not fit beside its 614-row slab: 4 groups
            (2, 26, 61, 61, 26, 7),    # s13: 2 groups of 13 filters (N = 96) with one slab buffer
            (40, 26, 70, 70, 9, 7),    # one buffer, 1440 tiles over the blocks
            # each slab buffer's mbarrier through many phases (a block's tiles over two buffers), groups
            # between its uses
            (300, 26, 32, 32, 8, 3),   # the sweep's s16 at batch 300: 2100 tiles
            (37, 8, 16, 16, 50, 3),    # 2 groups over many tiles
            (40, 26, 40, 40, 9, 7),    # 368 slab rows of 128 bytes: 480 tiles
        ),
        # the rows the step is for (s00 refused by step 29)
        supported_asks_the_gpu=True,
        supported=((10000, 11, 31, 31, 27, 5), (10000, 29, 29, 29, 19, 5), (10000, 30, 81, 81, 46, 7)),
        # 7 x 7 taps over 1500-pixel rows: a tile's slab alone is 9128 rows of 128 bytes, beyond shared memory in any
        # grouping; the message names the grouping that needs the least (one filter a group)
        refused=(Refusal((2, 32, 1500, 1500, 4, 7), says="weights (14 KB), a slab of 9128 rows (1141 KB) and 7 "
                                                         "staged rows (3 KB) exceed 227 KB of shared memory (4 "
                                                         "groups of 1 filters)"),
                 Refusal((2, 3, 12, 12, 8, 4), shared_memory=False, says=K4_REFUSED)),
        fp16_channels=(2,),
        in_turn=((6, 30, 40, 40, 26, 3), (3, 5, 9, 9, 4, 3), (6, 30, 40, 40, 26, 3)),
    ),
}
