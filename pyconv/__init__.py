"""pyconv: the ECE408 CNN-inference project, standalone.

Modules: data (Fashion-MNIST to HDF5), model (the model file), mxnet_import, reference (numpy oracle), engine
(CPU inference), gpu_engine (CUDA inference), timelog (/usr/bin/time logs), milestones, train and framework
(PyTorch), bench, report, profile. Native code: pyconv._cpu (always), pyconv._gpu (when built with CUDA) and pyconv._cupti (the
CUPTI trace behind `invoke profile`, when the toolkit has CUPTI)."""

__version__ = "0.1.0"
