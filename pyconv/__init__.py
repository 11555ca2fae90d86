"""pyconv: the ECE408 CNN-inference project, standalone.

Layers, each importing only the ones above it (tests/test_imports.py checks it): core (errors, paths, checks,
atomic files, the data set, the model file, the course's networks, the numpy reference, the MXNet import);
native (the one importer of the native modules); variants, verify, evidence, autotune; plan (the one selection
module); engines (CPU, GPU on one or several GPUs, PyTorch); bench.schema; report; bench; tools (milestones,
profile, sanitize, train). Native code: pyconv._cpu (always), pyconv._gpu (when built with CUDA and cuBLAS) and
pyconv._cupti (the CUPTI trace, when the toolkit has CUPTI), loaded through pyconv.native."""

__version__ = "0.1.0"
