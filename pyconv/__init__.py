"""pyconv: the ECE408 CNN-inference project, standalone.

Modules: data (Fashion-MNIST to HDF5), model (the model file), archs (the course's networks), mxnet_import,
reference (numpy oracle), engine (CPU inference), gpu_engine (CUDA inference, one or several GPUs), tuning (the
per-layer variant choice of `final`), timelog (/usr/bin/time logs), milestones, train and framework (PyTorch),
bench, report, profile (CUPTI summary), sanitize (compute-sanitizer). Native code: pyconv._cpu (always),
pyconv._gpu (when built with CUDA and cuBLAS) and pyconv._cupti (the CUPTI trace, when the toolkit has CUPTI)."""

__version__ = "0.1.0"
