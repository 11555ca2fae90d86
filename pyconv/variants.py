"""The convolution variants as typed records: what pyconv._cpu.variants() and pyconv._gpu.variants() say about each
variant (its own file in native/ describes it), plus the numpy reference as a CPU variant for milestone 2.

Nothing in Python lists variant names: which variant a milestone runs, may choose, runs only on request, or
refuses, is each variant's `roles` (see pyconv.plan for how they are used)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from . import native
from .core.errors import PyconvError

# The milestones a variant has a role in, as the command line names them and as the descriptors key them.
MILESTONE_KEYS = {"2": "m2", "3": "m3", "4": "m4", "final": "final"}
ROLES = ("default", "candidate", "on-request", "never")
EPILOGUES = ("none", "tanh-maxpool2")
# How a variant multiplies (native/common/variant.hpp): "fp32", or one of REDUCED_PRECISIONS, one tensor-core pass on
# operands rounded to TF32 or to FP16. The split variants (3xTF32, FP16 hi + lo) are as accurate as float32 and say
# "fp32".
REDUCED_PRECISIONS = ("tf32", "fp16")
PRECISIONS = ("fp32", *REDUCED_PRECISIONS)
PRECISION_NAMES = {"fp32": "float32", "tf32": "TF32", "fp16": "FP16"}  # as sentences name them
DEVICES = ("cpu", "gpu")
DEFAULT_RTOL = 1e-4  # what a descriptor's rtol = 0 stands for (native/common/variant.hpp)

Shape = tuple[int, int, int, int, int, int]  # B, C, H, W, M, K


def milestone_key(milestone: str) -> str:
    m = str(milestone).strip().lower()
    if m in MILESTONE_KEYS.values():
        return m
    if m not in MILESTONE_KEYS:
        raise PyconvError(f"unknown milestone '{milestone}' (known: {', '.join(MILESTONE_KEYS)})")
    return MILESTONE_KEYS[m]


@dataclass(frozen=True)
class Role:
    role: str  # one of ROLES
    reason: str = ""  # why, where the role is not default or candidate

    @property
    def choosable(self) -> bool:
        """The milestone may pick it by itself (without --impl)."""
        return self.role in ("default", "candidate")


@dataclass(frozen=True)
class Variant:
    name: str
    step: int | None  # ladder position (None: the numpy reference, which is not on the ladder)
    summary: str
    device: str  # "cpu" or "gpu"
    epilogue: str = "none"
    precision: str = "fp32"
    rtol: float = DEFAULT_RTOL
    x_on_host: bool = False  # reads x from host memory (the network keeps activations on the device)
    reads_u8: bool = False
    single_thread: bool = False  # a CPU variant that runs on one thread whatever OpenMP offers
    tunable: bool = False  # has several tile configurations, each a kernel of its own (sanitize runs each)
    # can write its output in half (the input of an FP16 fully connected layer) on the path a network runs it
    writes_f16: bool = False
    roles: Mapping[str, Role] = field(default_factory=dict)
    unsupported: Callable[[Shape], str] | None = field(default=None, compare=False, repr=False)

    def role(self, milestone: str) -> Role:
        key = milestone_key(milestone)
        if key in self.roles:
            return self.roles[key]
        return Role("never", f"not a {self.device.upper()} variant")

    @property
    def student(self) -> bool:
        """A student's file (cpu-student, gpu-student): run, benchmarked and sanitized only when named."""
        return is_student(self.name)

    @property
    def pools(self) -> bool:
        """Writes tanh + max-pool 2/2 of the convolution (a layer that they follow only)."""
        return self.epilogue == "tanh-maxpool2"

    @property
    def reduced_precision(self) -> bool:
        """Rounds its operands (TF32 or FP16): final runs it only where the end-to-end verdict allows it."""
        return self.precision in REDUCED_PRECISIONS

    def why_unsupported(self, shape: Sequence[int]) -> str:
        """'' when the variant takes a convolution of this (B, C, H, W, M, K), else why not."""
        return self.unsupported(tuple(int(v) for v in shape)) if self.unsupported else ""


def _need(d: Mapping, key: str, kinds, where: str):
    if key not in d:
        raise PyconvError(f"{where}: the descriptor has no '{key}' (a module built from older sources? "
                          "rebuild it: invoke build)")
    v = d[key]
    if not isinstance(v, kinds):
        raise PyconvError(f"{where}: '{key}' is {v!r}")
    return v


def from_dict(d: Mapping, unsupported: Callable[[Shape], str] | None = None) -> Variant:
    """A Variant from one descriptor dict of _cpu.variants() / _gpu.variants(); a PyconvError naming the variant
    and the field when the dict is not what the contract says."""
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise PyconvError(f"a variant descriptor without a name: {dict(d)!r}")
    where = f"variant '{name}'"
    device = _need(d, "device", str, where)
    epilogue = _need(d, "epilogue", str, where)
    precision = _need(d, "precision", str, where)
    for value, allowed, key in ((device, DEVICES, "device"), (epilogue, EPILOGUES, "epilogue"),
                                (precision, PRECISIONS, "precision")):
        if value not in allowed:
            raise PyconvError(f"{where}: {key} '{value}' is none of {', '.join(allowed)}")
    rtol = float(_need(d, "rtol", (int, float), where)) or DEFAULT_RTOL
    roles = {}
    for key, r in _need(d, "roles", Mapping, where).items():
        if key not in MILESTONE_KEYS.values() or not isinstance(r, Mapping) or r.get("role") not in ROLES:
            raise PyconvError(f"{where}: role {key!r}: {r!r} is not one of {', '.join(ROLES)}")
        roles[key] = Role(r["role"], str(r.get("reason") or ""))
    return Variant(name=name, step=int(_need(d, "step", int, where)), summary=str(d.get("summary", "")),
                   device=device, epilogue=epilogue, precision=precision, rtol=rtol,
                   x_on_host=bool(d.get("x_on_host", False)), reads_u8=bool(d.get("reads_u8", False)),
                   single_thread=bool(d.get("single_thread", False)),
                   tunable=bool(d.get("tunable", False)), writes_f16=bool(d.get("writes_f16", False)),
                   roles=roles, unsupported=unsupported)


def _registry(mod) -> list[Variant]:
    why = getattr(mod, "why_unsupported", None)

    def check_for(name):
        return None if why is None else (lambda shape: str(why(name, *shape)))

    return [from_dict(d, check_for(d.get("name"))) for d in mod.variants()]


# The numpy reference: milestone 2 runs it only when asked (--impl numpy); it is the oracle every variant is
# checked against (pyconv.verify), not a ladder step.
NUMPY = Variant(name="numpy", step=None, summary="the numpy reference (pyconv.core.reference.conv2d)", device="cpu",
                roles={"m2": Role("on-request", "the reference: runs only when named with --impl")})


def gpu_variants() -> list[Variant]:
    """pyconv._gpu's variants in ladder order (no GPU needed); NotBuilt / LoadFailed when the module is not there."""
    return _registry(native.gpu(device=False))


def cpu_variants(with_reference: bool = True) -> list[Variant]:
    """pyconv._cpu's variants in ladder order, then (with_reference) the numpy reference."""
    return [*_registry(native.cpu()), *([NUMPY] if with_reference else [])]


def all_variants() -> list[Variant]:
    """Every variant this build has: CPU (with numpy) and, where pyconv._gpu is built, GPU."""
    c, g = native.optional("_cpu"), native.optional("_gpu")
    return [*(_registry(c) if c is not None else []), NUMPY, *(_registry(g) if g is not None else [])]


STUDENT_VARIANTS = ("cpu-student", "gpu-student")
# The course's skeletons (native/student/new-forward.h and .cuh as handed out) stop at a CHECK whose message asks to
# remove it: a slot whose file still holds its skeleton's sentence is unstarted (a handout must hold them; tests of
# the slot skip while it does). One sentence per file, the one on the path a milestone runs: in new-forward.h the
# general template forward<cpu, DType>, which the student writes; in new-forward.cuh the float specialisation
# forward<gpu, float>. The .cuh's general template keeps its own CHECK ("... replace it with ...") in finished files:
# the course runs float only, so students leave it (tests/fixtures/student/good/new-forward.cuh does).
SKELETON_MARKS = {"new-forward.h": "Remove this line and replace it with your implementation.",
                  "new-forward.cuh": "Remove this line and replace with your implementation"}


def holds_skeleton(text: str, slot: str) -> bool:
    """A student file's text is still the course's skeleton; slot: the file's name or path (new-forward.h/.cuh)."""
    name = PurePath(slot).name
    if name not in SKELETON_MARKS:
        raise PyconvError(f"{slot}: not a student slot (known: {', '.join(SKELETON_MARKS)})")
    return SKELETON_MARKS[name] in text


def is_student(name: str) -> bool:
    """The student slots' variants: on request everywhere (a bench or sanitize run takes them when named)."""
    return name in STUDENT_VARIANTS


def by_name(variants: Iterable[Variant]) -> dict[str, Variant]:
    return {v.name: v for v in variants}


def find(variants: Sequence[Variant], name: str, what: str = "variant") -> Variant:
    """The variant called `name`, or a PyconvError listing the known ones."""
    for v in variants:
        if v.name == name:
            return v
    raise PyconvError(f"unknown {what} '{name}' (known: {', '.join(v.name for v in variants)})")
