"""pyconv: the ECE408 CNN-inference project, standalone.

Modules: data (Fashion-MNIST to HDF5), model (the model file), mxnet_import, reference (numpy oracle), engine
(CPU inference), gpu_engine (CUDA inference), timelog (/usr/bin/time logs), milestones, train and framework
(PyTorch), bench, report, profile. Native code: pyconv._cpu (always) and pyconv._gpu (when built with CUDA)."""

__version__ = "0.1.0"
