"""The model zoo: trains the course's networks (archs.py) with PyTorch on the Fashion-MNIST train set and
writes the project's HDF5 model file; and the accuracy table of the shipped models.

Training runs on the CPU and is deterministic: one seed drives the initialisation and the shuffling, and
torch.use_deterministic_algorithms is on, so the same seed gives the same weights on the same machine. The
net sees pixels / 255 (tanh saturates on raw 0..255 values and training stalls); that scale is folded into the
first convolution when the model is saved (framework.export_weights), so the saved model takes raw pixels like
the course's. The file is written once, at the end, atomically: an interrupted or failed run leaves no model
file."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np

from ..core import archs, data, paths
from ..core.checks import check_model_name, check_positive_int
from ..core.errors import PyconvError
from ..core.fileio import check_writable, write_text_atomic
from ..core.model import Model, load_model, save_model, shipped_models
from ..engines.framework import build_net, export_weights, require_torch

INPUT_SCALE = 1.0 / 255.0
ACCURACY_COUNTS = (100, 1000, 10000)
ACCURACY_JSON = paths.RESULTS / "model-accuracy.json"
ACCURACY_MD = paths.RESULTS / "model-accuracy.md"


def train(arch: str, name: str, epochs: int = 2, seed: int = 0, batch_size: int = 64, lr: float = 1e-3,
          max_batches: int | None = None, threads: int = 1, dest: str | Path | None = None,
          force: bool = False, progress: bool = True, on_batch=None) -> Path:
    """Train architecture `arch` and save it as model `name` (datasets/models/NAME.h5 unless `dest`).

    Adam (lr) on cross-entropy, mini-batches of `batch_size` in a seeded random order each epoch. max_batches
    stops after that many batches in all (how the deliberately under-trained model is made). on_batch(epoch,
    batch, loss) is called after every step (tests use it to interrupt a run). Returns the written path.

    threads: CPU threads for PyTorch. The weights depend on it (the order of float sums does), so it is fixed
    rather than taken from the machine; 1 also trained fastest on a busy 2-core machine (sp19: 72 ms per step
    against 266 ms with 2 threads, both under load, where 2 threads spin waiting for each other)."""
    spec = archs.get_arch(arch)
    name = check_model_name(name)
    epochs = check_positive_int(epochs, "epochs")
    batch_size = check_positive_int(batch_size, "batch size")
    if max_batches is not None:
        max_batches = check_positive_int(max_batches, "max batches")
    threads = check_positive_int(threads, "threads")
    try:
        seed = int(seed)
        lr = float(lr)
    except (TypeError, ValueError):
        raise PyconvError(f"seed must be an integer and lr a number, got {seed!r}, {lr!r}") from None
    if not (lr > 0 and np.isfinite(lr)):
        raise PyconvError(f"lr must be a positive number, got {lr}")
    dest = Path(dest) if dest is not None else paths.USER_MODELS / f"{name}.h5"
    if dest.exists() and not force:
        raise PyconvError(f"{dest} exists; pass --force to overwrite it")
    check_writable(dest, "model file")  # now, not after minutes of training
    torch = require_torch()
    from tqdm import tqdm

    data.prepare_train()  # the training split is written only when training asks for it
    x_all, y_all = data.load_train(spec.input_size)
    x_all = torch.from_numpy(np.ascontiguousarray(x_all))
    y_all = torch.from_numpy(np.asarray(y_all, dtype=np.int64))

    threads_before = torch.get_num_threads()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    order_gen = torch.Generator().manual_seed(seed)
    model = archs.empty_model(arch, name)
    net = build_net(model, load_weights=False, softmax=False)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = len(y_all)
    per_epoch = (n + batch_size - 1) // batch_size
    steps = 0
    t0 = time.monotonic()
    try:
        for epoch in range(1, epochs + 1):
            order = torch.randperm(n, generator=order_gen)
            total = per_epoch if max_batches is None else min(per_epoch, max_batches - steps)
            running, seen = 0.0, 0
            with tqdm(total=total, desc=f"{name} epoch {epoch}/{epochs}", unit="batch", disable=not progress,
                      dynamic_ncols=True) as bar:
                for b in range(total):
                    idx = order[b * batch_size:(b + 1) * batch_size]
                    xb = x_all[idx].float() * INPUT_SCALE
                    loss = loss_fn(net(xb), y_all[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    steps += 1
                    running += loss.item() * len(idx)
                    seen += len(idx)
                    bar.set_postfix(loss=f"{running / seen:.4f}")
                    bar.update(1)
                    if on_batch is not None:
                        on_batch(epoch, b + 1, loss.item())
            if max_batches is not None and steps >= max_batches:
                break
    except KeyboardInterrupt:
        raise PyconvError(f"training of '{name}' interrupted after {steps} batches; "
                          "no model file written") from None
    finally:
        torch.use_deterministic_algorithms(deterministic_before)
        torch.set_num_threads(threads_before)
    seconds = time.monotonic() - t0
    how = f"invoke train --arch {arch} --name {name} --epochs {epochs} --seed {seed}"
    if batch_size != 64:
        how += f" --batch-size {batch_size}"
    if lr != 1e-3:
        how += f" --lr {lr:g}"
    if max_batches is not None:
        how += f" --max-batches {max_batches}"
    if threads != 1:
        how += f" --threads {threads}"
    model.description = (f"{spec.semester} network trained with PyTorch {torch.__version__} on the "
                         f"Fashion-MNIST train set ({how}; {steps} batches of {batch_size}, "
                         f"{seconds:.0f} s on {threads} CPU thread{'s' if threads > 1 else ''})")
    export_weights(net, model, input_scale=INPUT_SCALE)
    save_model(model, dest)
    return dest


def measure_accuracy(model: Model, counts=ACCURACY_COUNTS, impl: str | None = None) -> dict[str, float]:
    """Correctness over the first N test images for each N, as `invoke milestone --m 2` computes it (with its
    default CPU variant unless `impl` names one)."""
    from ..engines import cpu
    from .milestones import make_plan

    out = {}
    for count in counts:
        x, labels = data.load_test(model.input_size, count)
        res = cpu.run_plan(make_plan("2", model, len(x), impl), model, x)
        out[str(count)] = float(np.mean(res.labels == np.asarray(labels)))
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=paths.ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def accuracy_table(json_path: Path = ACCURACY_JSON, md_path: Path = ACCURACY_MD) -> dict:
    """Measure every shipped model (datasets/models/*.h5) at 100/1000/10000 as milestone 2 runs them (its plan's
    variant, which the JSON names: cpu-fast in this project) and write the JSON and the Markdown table the README
    shows."""
    data.require_data()
    for dest in (json_path, md_path):
        check_writable(dest, "accuracy table")
    names = shipped_models()
    if not names:
        raise PyconvError(f"no shipped models in {paths.MODELS}")
    from .milestones import make_plan

    rows, used = [], set()
    for name in names:
        model = load_model(name)
        used.update(make_plan("2", model, 1).impls)
        c, h, w = model.input_shape
        rows.append({"name": name, "arch": model.arch, "input": f"{h}x{w}", "description": model.description,
                     "accuracy": measure_accuracy(model)})
    result = {"measured_by": f"invoke milestone --m 2 (engine.forward_cpu, {', '.join(sorted(used))})",
              "commit": _commit(),
              "date": time.strftime("%Y-%m-%d"), "counts": list(ACCURACY_COUNTS), "models": rows}
    write_text_atomic(json_path, json.dumps(result, indent=2) + "\n")
    write_text_atomic(md_path, markdown_table(result))
    return result


def markdown_table(result: dict) -> str:
    head = "| model | arch | input | how it was made | " + " | ".join(
        f"Correctness @{n}" for n in result["counts"]) + " |\n"
    head += "|---|---|---|---|" + "---|" * len(result["counts"]) + "\n"
    body = ""
    for r in result["models"]:
        accs = " | ".join(f"{r['accuracy'][str(n)]:.4g}" for n in result["counts"])
        body += f"| `{r['name']}` | {r['arch']} | {r['input']} | {r['description']} | {accs} |\n"
    return head + body
