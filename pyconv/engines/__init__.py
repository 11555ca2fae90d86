"""Inference engines: the CPU (pyconv._cpu), the GPU (pyconv._gpu, one or several GPUs) and PyTorch."""
