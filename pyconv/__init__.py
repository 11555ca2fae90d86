"""pyconv: the ECE408 CNN-inference project, standalone.

Sub-packages: core (errors, paths, checks, atomic files, the data set, the model file, the course's networks,
the numpy reference, the MXNet checkpoint import), engines (CPU inference, CUDA inference on one or several GPUs,
PyTorch), bench, report, tools (milestones, profile, sanitize, train, the /usr/bin/time log); tuning (the per-layer
variant choice of `final`). Native code: pyconv._cpu (always), pyconv._gpu (when built with CUDA and cuBLAS) and
pyconv._cupti (the CUPTI trace, when the toolkit has CUPTI)."""

__version__ = "0.1.0"
