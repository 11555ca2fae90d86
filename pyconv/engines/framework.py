"""Milestone 1: the whole network in PyTorch, the stock framework the project compares itself with.

The PyTorch network is built from the same HDF5 model the project's own engine runs (pyconv.model.Model),
layer for layer, so both see identical weights and raw 0..255 pixels. m1.1 runs it on the CPU, m1.2 on a CUDA
GPU with cuDNN autotuning (torch.backends.cudnn.benchmark) and TF32 off, so the GPU computes in true float32
like the project's kernels. PyTorch is optional (the `torch` extra): everything here imports it lazily
and says how to install it when it is missing. The trainer (train.py) builds its networks here too."""

from __future__ import annotations

import numpy as np

from ..core import optional
from ..core.errors import PyconvError
from ..core.model import Model

TORCH_MISSING = optional.missing_message("torch")
# Images per forward call on the CPU: bounds peak memory (fa18's first convolution alone produces 2 GB of
# float32 for 10000 images); results do not depend on it beyond float rounding. The GPU takes the whole batch.
CPU_CHUNK = 1000


def require_torch():
    """The torch module, or a PyconvError naming the extra that installs it."""
    return optional.require("torch")


def cuda_available() -> bool:
    return bool(require_torch().cuda.is_available())


def build_net(model: Model, load_weights: bool = True, softmax: bool = True):
    """A torch.nn.Sequential computing `model` layer for layer (float32, on the CPU).

    load_weights=False keeps PyTorch's default initialisation (the trainer's starting point); softmax=False
    drops a final softmax so the net returns logits (what the training loss takes)."""
    torch = require_torch()
    nn = torch.nn
    mods = []
    channels = model.input_shape[0]
    features = None
    layers = model.layers
    if not softmax and layers and layers[-1].type == "softmax":
        layers = layers[:-1]
    for layer in layers:
        t = layer.type
        if t == "conv":
            mod = nn.Conv2d(channels, layer.out_channels, layer.kernel, stride=1, padding=0, bias=False)
            channels = layer.out_channels
        elif t == "tanh":
            mod = nn.Tanh()
        elif t == "relu":
            mod = nn.ReLU()
        elif t == "sigmoid":
            mod = nn.Sigmoid()
        elif t == "pool":
            pool = nn.MaxPool2d if layer.mode == "max" else nn.AvgPool2d
            mod = pool(layer.kernel, layer.stride)  # floor mode, like reference.pool2d
        elif t == "flatten":
            mod = nn.Flatten()
        elif t == "fc":
            if features is None:
                features = _flat_features(model, layer)
            mod = nn.Linear(features, layer.out_features, bias=True)
            features = layer.out_features
        elif t == "softmax":
            mod = nn.Softmax(dim=1)
        else:
            raise PyconvError(f"framework: unsupported layer type '{t}'")
        if load_weights and t in ("conv", "fc"):
            with torch.no_grad():
                mod.weight.copy_(torch.from_numpy(np.ascontiguousarray(layer.weight)))
                if t == "fc":
                    mod.bias.copy_(torch.from_numpy(np.ascontiguousarray(layer.bias)))
        mods.append(mod)
    return nn.Sequential(*mods)


def _flat_features(model: Model, fc_layer) -> int:
    """Inputs of the first fully connected layer, from the model's shape chain (needs no weights)."""
    c, h, w = model.input_shape
    for layer in model.layers:
        if layer is fc_layer:
            return c * h * w
        if layer.type == "conv":
            c, h, w = layer.out_channels, h - layer.kernel + 1, w - layer.kernel + 1
        elif layer.type == "pool":
            h, w = (h - layer.kernel) // layer.stride + 1, (w - layer.kernel) // layer.stride + 1
    raise PyconvError("framework: fully connected layer not found in its own model")


def export_weights(net, model: Model, input_scale: float = 1.0) -> Model:
    """Copy the trained weights of `net` (built by build_net from `model`) into `model`'s layers as float32.

    input_scale folds an input scaling the net was trained with into the first convolution: it is linear and
    has no bias, so conv(s * x, W) == conv(x, s * W), so the saved model takes raw pixels like any other."""
    torch = require_torch()
    params = [m for m in net if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    targets = [layer for layer in model.layers if layer.type in ("conv", "fc")]
    if len(params) != len(targets):
        raise PyconvError(f"framework: the net has {len(params)} weighted layers, model '{model.name}' has "
                          f"{len(targets)}")
    first_conv = True
    for mod, layer in zip(params, targets, strict=True):
        w = mod.weight.detach().to("cpu", torch.float64).numpy()
        if layer.type == "conv" and first_conv:
            w = w * input_scale
            first_conv = False
        layer.weight = np.ascontiguousarray(w, dtype=np.float32)
        if layer.type == "fc":
            layer.bias = np.ascontiguousarray(mod.bias.detach().cpu().numpy(), dtype=np.float32)
    return model


def predict(net, x_uint8: np.ndarray, device: str = "cpu") -> np.ndarray:
    """Predicted labels of `net` on raw pixels x[N][C][H][W] (uint8 or float), on "cpu" or "cuda"."""
    torch = require_torch()
    chunk = CPU_CHUNK if device == "cpu" else max(len(x_uint8), 1)
    out = []
    with torch.inference_mode():
        for start in range(0, len(x_uint8), chunk):
            xb = torch.from_numpy(np.ascontiguousarray(x_uint8[start:start + chunk])).to(device)
            out.append(net(xb.float()).argmax(dim=1).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.int64)


def _configure_gpu(torch) -> None:
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.benchmark = True  # cuDNN times its algorithms on the first call, keeps the fastest
    torch.backends.cudnn.allow_tf32 = False  # true float32, like the project's kernels
    torch.backends.cuda.matmul.allow_tf32 = False


def run_m1(model: Model, x_uint8: np.ndarray, labels: np.ndarray, device: str = "cpu") -> float:
    """Milestone 1 on one device ("cpu" = m1.1, "gpu" = m1.2; "both" runs one after the other).

    Prints what the course's framework run printed (New Inference, EvalMetric) and returns the accuracy."""
    torch = require_torch()
    if device == "both":
        acc = run_m1(model, x_uint8, labels, "cpu")
        if cuda_available():
            run_m1(model, x_uint8, labels, "gpu")
        else:
            print("m1.2: no CUDA GPU visible; skipped", flush=True)
        return acc
    if device not in ("cpu", "gpu"):
        raise PyconvError(f"--device must be cpu, gpu or both, got '{device}'")
    net = build_net(model).eval()
    if device == "cpu":
        print(f"m1.1: PyTorch {torch.__version__} on the CPU ({torch.get_num_threads()} threads)", flush=True)
        target = "cpu"
    else:
        if not torch.cuda.is_available():
            raise PyconvError("m1.2 needs a CUDA GPU: PyTorch sees none (torch.cuda.is_available() is False)")
        _configure_gpu(torch)
        target = "cuda"
        net = net.to(target)
        print(f"m1.2: PyTorch {torch.__version__} on {torch.cuda.get_device_name()} "
              f"(cuDNN {torch.backends.cudnn.version()}, autotuned, TF32 off)", flush=True)
    print("New Inference", flush=True)
    pred = predict(net, x_uint8, target)
    acc = float(np.mean(pred == np.asarray(labels)))
    print(f"EvalMetric: {{'accuracy': {acc!r}}}", flush=True)
    return acc
