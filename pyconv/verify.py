"""The one verify harness: how a convolution's output is checked against the numpy reference, everywhere (the
bench's correctness gate, compute-sanitizer's wrong-result check, the tests).

- inputs: random_nonzero, uniform in [0.05, 1] with a random sign (never zero: a zero input hides an output the
  kernel never wrote, and the outputs are poisoned with NaN before the launch);
- the reference: pyconv.core.reference.conv2d, then tanh + max-pool 2/2 for a variant whose epilogue fuses them;
- the tolerance: |y - ref| <= atol + rtol*|ref|, rtol = the variant's own (pyconv.variants), atol =
  rtol*sqrt(C*K*K): with inputs of magnitude <= 1 the float32 rounding error of a sum of C*K*K products grows
  like its square root;
- the comparison: a wrong shape or a NaN fails; the result names how many elements are off, the worst one's
  position and its error."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .core import reference

CHECK_IMAGES = 32  # images checked at each end of a large batch (first and last)


def random_nonzero(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    v = rng.uniform(0.05, 1.0, tuple(shape)) * rng.choice(np.array([-1.0, 1.0]), tuple(shape))
    return np.ascontiguousarray(v, dtype=np.float32)


def random_nonzero_batch(rng: np.random.Generator, shape: Sequence[int], chunk_values: int = 1 << 24) -> np.ndarray:
    """random_nonzero's distribution for inputs of gigabytes: drawn in float32, a few images at a time into the
    output (random_nonzero's float64 temporaries would take six times the array's size)."""
    shape = tuple(int(v) for v in shape)
    out = np.empty(shape, dtype=np.float32)
    per_image = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    step = max(1, chunk_values // max(1, per_image))
    for i in range(0, shape[0], step):
        part = out[i:i + step]
        rng.random(part.shape, dtype=np.float32, out=part)
        part *= np.float32(0.95)
        part += np.float32(0.05)
        part[rng.integers(0, 2, part.shape, dtype=np.uint8) == 0] *= np.float32(-1.0)
    return out


def tolerance(rtol: float, C: int, K: int) -> tuple[float, float]:
    """(rtol, atol) for a convolution over C input channels with K x K filters."""
    return float(rtol), float(rtol) * float(np.sqrt(C * K * K))


def expected(x: np.ndarray, k: np.ndarray, epilogue: str = "none") -> np.ndarray:
    """The reference output, with the variant's epilogue ('none' or 'tanh-maxpool2')."""
    y = reference.conv2d(x, k)
    return reference.tanh_maxpool2(y) if epilogue == "tanh-maxpool2" else y


@dataclass(frozen=True)
class Comparison:
    passed: bool
    max_abs_err: float | None
    max_rel_err: float | None  # max |y - ref| / (|ref| + atol/rtol): finite where ref is near zero
    rtol: float
    atol: float
    bad: int = 0  # elements off (NaN included)
    nan: int = 0  # of which NaN: never written
    size: int = 0
    where: tuple[int, ...] | None = None  # the worst element (a NaN counts as the worst)
    got: float | None = None
    want: float | None = None
    shape_error: str = ""

    @property
    def why(self) -> str:
        """'' when it passed, else one line."""
        if self.shape_error:
            return self.shape_error
        if self.passed:
            return ""
        return (f"{self.bad} of {self.size} elements off" + (f" ({self.nan} NaN: never written)" if self.nan else "")
                + f"; worst at {self.where}: got {self.got:.6g}, want {self.want:.6g}")

    def as_dict(self) -> dict:
        """The bench JSON's `check` entry."""
        if self.shape_error:
            return {"passed": False, "why": self.shape_error, "max_abs_err": None, "max_rel_err": None,
                    "rtol": self.rtol, "atol": self.atol}
        out = {"passed": self.passed, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
               "rtol": self.rtol, "atol": self.atol}
        if not self.passed:
            out["why"] = f"{self.bad} of {self.size} elements off" + (
                f" ({self.nan} NaN: never written)" if self.nan else "")
            out["where"] = list(self.where)
        return out


def compare(y: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> Comparison:
    """Element-wise |y - ref| <= atol + rtol*|ref|; a NaN or a wrong shape fails."""
    if y.shape != ref.shape:
        return Comparison(False, None, None, rtol, atol, shape_error=f"shape {y.shape} != reference {ref.shape}")
    y64, r64 = y.astype(np.float64), ref.astype(np.float64)
    err = np.abs(y64 - r64)
    bound = atol + rtol * np.abs(r64)
    bad = ~(err <= bound)
    finite = np.where(np.isnan(err), 0.0, err)
    n_bad = int(bad.sum())
    out = dict(passed=n_bad == 0, max_abs_err=float(finite.max()) if finite.size else 0.0,
               max_rel_err=float((finite / (np.abs(r64) + atol / rtol)).max()) if finite.size else 0.0,
               rtol=rtol, atol=atol, bad=n_bad, nan=int(np.isnan(y64).sum()), size=int(y.size))
    if n_bad:
        excess = np.where(np.isnan(err), np.inf, err - bound)
        i = np.unravel_index(int(np.argmax(excess)), y.shape)
        out.update(where=tuple(int(v) for v in i), got=float(y64[i]), want=float(r64[i]))
    return Comparison(**out)


def check_slices(batch: int) -> list[slice]:
    """The images a check of a large batch covers: the first CHECK_IMAGES and the last CHECK_IMAGES (once if they
    overlap); the last ones catch grid-indexing errors that only large batches reach."""
    n = min(CHECK_IMAGES, batch)
    first = slice(0, n)
    if batch <= n:
        return [first]
    return [first, slice(max(n, batch - CHECK_IMAGES), batch)]


def check_output(y: np.ndarray, x: np.ndarray, k: np.ndarray, epilogue: str, rtol: float, atol: float,
                 cache: dict | None = None) -> dict:
    """The output y of a whole batch against the reference on check_slices (the bench JSON's `check`): passed
    only if every checked element is within tolerance; the largest errors over all checked images. cache: a dict
    kept by a caller that checks several variants on the same x and k (the reference is then computed once per
    epilogue)."""
    results = []
    for s in check_slices(len(x)):
        key = (s.start, s.stop, epilogue)
        ref = cache.get(key) if cache is not None else None
        if ref is None:
            ref = expected(x[s], k, epilogue)
            if cache is not None:
                cache[key] = ref
        c = compare(y[s], ref, rtol, atol)
        d = c.as_dict()
        if "where" in d:
            d["where"] = [d["where"][0] + s.start, *d["where"][1:]]
        results.append(d)
    errs = [r for r in results if r["max_abs_err"] is not None]
    out = {"passed": all(r["passed"] for r in results),
           "max_abs_err": max((r["max_abs_err"] for r in errs), default=None),
           "max_rel_err": max((r["max_rel_err"] for r in errs), default=None),
           "rtol": rtol, "atol": atol, "images_checked": sum(s.stop - s.start for s in check_slices(len(x)))}
    whys = [r["why"] for r in results if "why" in r]
    if whys:
        out["why"] = "; ".join(whys)
    where = next((r["where"] for r in results if "where" in r), None)
    if where is not None:
        out["where"] = where
    return out


def check_variant(conv, variant, shape: Sequence[int], rng: np.random.Generator) -> Comparison:
    """Run `conv(name, x, k)` (a native module's conv) for one variant on random inputs of this (B, C, H, W, M, K)
    and compare with the reference under the variant's tolerance."""
    b, c, h, w, m, k = shape
    x = random_nonzero(rng, (b, c, h, w))
    wt = random_nonzero(rng, (m, c, k, k))
    y = conv(variant.name, x, wt)
    rtol, atol = tolerance(variant.rtol, c, k)
    return compare(np.asarray(y), expected(x, wt, variant.epilogue), rtol, atol)
