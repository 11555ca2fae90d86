"""The course's editions, one row per semester: what a semester's students got, ran and were graded on.

One table (EDITIONS) answers every per-semester question the tasks ask: which network (model and architecture)
and data, which student files and signatures, how the milestones were numbered and what each ran and printed,
the batch, and the performance targets. The tasks look an edition up once (`get`) and read its row; no task
holds a condition on a semester.

Two frameworks: MXNet (2017fa-2019fa: `new-forward.h` / `new-forward.cuh`, `forward<xpu, DType>(y, x, w)`; the
course's branches 2017fa, 2019sp, 2019fa) and Mini-DNN (2020fa on: `cpu-new-forward.cc` with `conv_forward_cpu`,
`new-forward.cu` with a `GPUInterface`; the branches 2020fa, 2021sp, 2021fa and the later skeletons' readmes).
The Mini-DNN interface changed over the years; `interface` names its generation:
    2020fa  one host call conv_forward_gpu(host_y, host_x, host_k, B, M, C, H, W, K): allocate, copy, launch
    2021    prolog / conv_forward_gpu / epilog (the student allocates and copies in the prolog, frees in the epilog)
    2022fa  the same, parameters renamed (output, input, mask, Batch, Map_out, Channel, Height, Width, K)
    2023fa  a stride S on all four functions, stride test cases before the network, graded at batch 5000
    2024sp  files under Project/project/src/layer/custom/ on a Slurm cluster, more files per milestone, m1 with a
            CPU and a GPU program
Where the course's own pages did not say something (a target, a baseline), the row holds None rather than a guess."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PyconvError

DEFAULT_EDITION = "2019sp"  # the project's default since its start: model ece408, milestones 1..final


@dataclass(frozen=True)
class Milestone:
    """One of an edition's milestones as that edition numbered it. runs: device -> the project's milestone that
    does that work ("1" PyTorch, "2" the CPU convolution, "3" a baseline GPU kernel, "4" an optimised one,
    "final" the fastest plan); a milestone with a CPU and a GPU program has two entries (`--device` picks)."""

    label: str
    runs: tuple[tuple[str, str], ...]  # ((device, project milestone), ...), first = the default device
    what: str
    profile: str = ""  # the profiler the course asked for at this milestone ("" none)

    def project_milestone(self, device: str | None = None) -> str:
        """What runs for `device` (None or "both": the first); a milestone of one program ignores it, as the
        project's milestones 2..final always have."""
        table = dict(self.runs)
        if device in (None, "both") or len(table) == 1:
            return self.runs[0][1]
        if device not in table:
            raise PyconvError(f"milestone {self.label} runs on {' or '.join(table)}, not '{device}'")
        return table[device]


@dataclass(frozen=True)
class StudentFile:
    path: str  # where the course put it, relative to the student's project folder
    signature: str  # the function (or class) the student fills in


@dataclass(frozen=True)
class Edition:
    name: str  # "2021fa"
    semester: str  # "Fall 2021"
    framework: str  # "mxnet" | "minidnn"
    interface: str  # mxnet: "mxnet"; minidnn: "2020fa" | "2021" | "2022fa" | "2023fa" | "2024sp"
    model: str  # the default model (datasets/models/<model>.h5)
    arch: str  # pyconv.core.archs name of that model's network
    input_size: int  # image side of the test set
    batch: int  # the batch the course timed and graded at
    student_files: tuple[StudentFile, ...]
    milestones: tuple[Milestone, ...]
    baseline_ms: float | None = None  # sum of Op Times a correct baseline kernel takes (no performance credit above)
    target_ms: float | None = None  # sum of Op Times for full performance credit
    ranking: str = ""  # how the class ranking counted
    source: str = ""  # where these facts come from

    def milestone(self, label) -> Milestone:
        text = str(label).strip().lower()
        for m in self.milestones:
            if m.label == text:
                return m
        of = "" if self.name == DEFAULT_EDITION else f" of edition {self.name}"
        raise PyconvError(f"unknown milestone '{text}'{of} (known: {', '.join(m.label for m in self.milestones)})")

    @property
    def minidnn(self) -> bool:
        return self.framework == "minidnn"


def performance_grade(edition: Edition, sum_ms: float) -> float | None:
    """The course's performance credit for a sum of Op Times (ms) at the edition's batch: 1 at or under the target,
    0 at or over the baseline, linear in between (2021fa: 70 and 170 ms). None where the edition set no targets."""
    if edition.baseline_ms is None or edition.target_ms is None:
        return None
    if sum_ms <= edition.target_ms:
        return 1.0
    if sum_ms >= edition.baseline_ms:
        return 0.0
    return (edition.baseline_ms - sum_ms) / (edition.baseline_ms - edition.target_ms)


# --- the student files of each generation ---

_MX_CPU = StudentFile("ece408_src/new-forward.h", "template <typename cpu, typename DType> void forward(Tensor<cpu, 4, "
                      "DType> &y, const Tensor<cpu, 4, DType> &x, const Tensor<cpu, 4, DType> &w)")
_MX_GPU = StudentFile("ece408_src/new-forward.cuh", "template <> void forward<gpu, float>(Tensor<gpu, 4, float> &y, "
                      "const Tensor<gpu, 4, float> &x, const Tensor<gpu, 4, float> &w)")
_ARGS_2020 = "const int B, const int M, const int C, const int H, const int W, const int K"
_ARGS_2022 = ("const int Batch, const int Map_out, const int Channel, const int Height, const int Width, "
              "const int K")
_ARGS_2023 = _ARGS_2022 + ", const int S"


def _minidnn_files(folder: str, args: str, y: str, x: str, k: str, one_call: bool = False,
                   extra: tuple[StudentFile, ...] = ()) -> tuple[StudentFile, ...]:
    cpu = StudentFile(f"{folder}cpu-new-forward.cc",
                      f"void conv_forward_cpu(float *{y}, const float *{x}, const float *{k}, {args})")
    if one_call:
        gpu = StudentFile(f"{folder}new-forward.cu", f"void GPUInterface::conv_forward_gpu(float *host_{y}, "
                          f"const float *host_{x}, const float *host_{k}, {args})")
    else:
        gpu = StudentFile(f"{folder}new-forward.cu",
                          f"GPUInterface::conv_forward_gpu_prolog(const float *host_{y}, const float *host_{x}, "
                          f"const float *host_{k}, float **device_{y}_ptr, float **device_{x}_ptr, "
                          f"float **device_{k}_ptr, {args}); conv_forward_gpu(float *device_{y}, "
                          f"const float *device_{x}, const float *device_{k}, {args}); "
                          f"conv_forward_gpu_epilog(float *host_{y}, float *device_{y}, float *device_{x}, "
                          f"float *device_{k}, {args})")
    return (cpu, gpu, *extra)


_FILES_2020 = _minidnn_files("custom/", _ARGS_2020, "y", "x", "k", one_call=True)
_FILES_2021 = _minidnn_files("custom/", _ARGS_2020, "y", "x", "k")
_FILES_2022 = _minidnn_files("custom/", _ARGS_2022, "output", "input", "mask")
_FILES_2023 = _minidnn_files("custom/", _ARGS_2023, "output", "input", "mask")
_FILES_2024 = _minidnn_files("Project/project/src/layer/custom/", _ARGS_2022, "output", "input", "mask", extra=(
    StudentFile("Project/project/src/layer/custom/matmul-unroll.cu", "the unrolled (im2col) input and a matrix "
                "multiplication, one GPUInterface like new-forward.cu's"),
    StudentFile("Project/project/src/layer/custom/kernel-fusion-forward.cu", "unrolling fused with the "
                "multiplication, one GPUInterface"),
    StudentFile("Project/project/src/layer/custom/m3-forward.cu", "the student's optimised GPUInterface")))

# --- the milestones of each generation ---

_MX_MILESTONES = (
    Milestone("1", (("cpu", "1"), ("gpu", "1")), "the network in the stock framework (CPU and GPU)"),
    Milestone("2", (("cpu", "2"),), "the student's CPU convolution (new-forward.h)"),
    Milestone("3", (("gpu", "3"),), "the student's first GPU kernel (new-forward.cuh)", "nvprof"),
    Milestone("4", (("gpu", "4"),), "optimisations", "nvprof"),
    Milestone("final", (("gpu", "final"),), "the fastest kernel", "nvprof"),
)
_MILESTONES_2020FA = (
    Milestone("2", (("cpu", "2"),), "the CPU convolution (conv_forward_cpu)", "gprof"),
    Milestone("3", (("gpu", "3"),), "a baseline GPU kernel", "nsys, nv-nsight-cu-cli"),
    Milestone("4", (("gpu", "4"),), "three optimisations", "nsys, nv-nsight-cu-cli"),
    Milestone("final", (("gpu", "final"),), "more optimisations; the class ranking", "nsys, nv-nsight-cu-cli"),
)
_MILESTONES_2021SP = (
    Milestone("1", (("cpu", "2"),), "the CPU convolution (conv_forward_cpu)", "gprof"),
    Milestone("2", (("gpu", "3"),), "a baseline GPU kernel", "nsys, nv-nsight-cu-cli"),
    Milestone("3", (("gpu", "4"),), "three optimisations", "nsys, nv-nsight-cu-cli"),
    Milestone("final", (("gpu", "final"),), "more optimisations", "nsys, nv-nsight-cu-cli"),
)
_MILESTONES_2021FA = (  # the readme of 2021fa; the later Mini-DNN editions kept its three milestones
    Milestone("1", (("cpu", "2"),), "the CPU convolution (conv_forward_cpu)", "gprof"),
    Milestone("2", (("gpu", "3"),), "a baseline GPU kernel", "nsys, nv-nsight-cu-cli"),
    Milestone("3", (("gpu", "final"),), "optimisations; the performance grade and the class ranking",
              "nsys, nv-nsight-cu-cli"),
)
_MILESTONES_2024 = (
    Milestone("1", (("cpu", "2"), ("gpu", "3")), "the CPU convolution (m1_cpu) and a baseline GPU kernel (m1_gpu)",
              "gprof, nsys"),
    Milestone("2", (("gpu", "4"),), "unrolling with a matrix multiplication, then kernel fusion",
              "nsys, ncu"),
    Milestone("3", (("gpu", "final"),), "optimisations; the performance grade and the class ranking", "nsys, ncu"),
)

_RANKING_OP = "sum of both conv layers' Op Times at the graded batch, fastest of the staff's re-runs"
_COURSE = "illinois-impact/ece408_project"


def _mx(name, semester, model, arch, size, source) -> Edition:
    return Edition(name, semester, "mxnet", "mxnet", model, arch, size, 10000, (_MX_CPU, _MX_GPU), _MX_MILESTONES,
                   ranking="sum of the Op Times of milestone final at batch 10000", source=source)


def _md(name, semester, interface, files, milestones, batch=10000, baseline=None, target=None, ranking=_RANKING_OP,
        source="") -> Edition:
    return Edition(name, semester, "minidnn", interface, "ece408-86", "fa20", 86, batch, files, milestones,
                   baseline, target, ranking, source)


EDITIONS: dict[str, Edition] = {e.name: e for e in (
    _mx("2017fa", "Fall 2017", "ece408-high", "fa17", 28, f"{_COURSE} branch 2017fa"),
    _mx("2018sp", "Spring 2018", "ece408-sp18", "sp18", 64, "public student solutions of Spring 2018"),
    _mx("2018fa", "Fall 2018", "ece408-fa18", "fa18", 72, "public student solutions of Fall 2018"),
    _mx("2019sp", "Spring 2019", "ece408", "sp19", 48, f"{_COURSE} branch 2019sp"),
    _mx("2019fa", "Fall 2019", "ece408-fa19", "fa19", 70, f"{_COURSE} branch 2019fa"),
    _md("2020fa", "Fall 2020", "2020fa", _FILES_2020, _MILESTONES_2020FA,
        ranking="sum of Op Times at batch 10000 (from the first copy back to the host), graded as standard "
                "deviations from the class median", source=f"{_COURSE} branch 2020fa"),
    _md("2021sp", "Spring 2021", "2021", _FILES_2021, _MILESTONES_2021SP,
        ranking="sum of Op Times at batch 10000 (conv_forward_gpu alone), shown, not graded",
        source=f"{_COURSE} branch 2021sp"),
    _md("2021fa", "Fall 2021", "2021", _FILES_2021, _MILESTONES_2021FA, baseline=170.0, target=70.0,
        source=f"{_COURSE} branch 2021fa (readme: 170 ms baseline, 70 ms for full credit, batch 10000)"),
    _md("2022sp", "Spring 2022", "2021", _FILES_2021, _MILESTONES_2021FA,
        source="public student solutions of Spring 2022"),
    _md("2022fa", "Fall 2022", "2022fa", _FILES_2022, _MILESTONES_2021FA,
        source="the Fall 2022 skeleton's readme; public student solutions"),
    _md("2023sp", "Spring 2023", "2022fa", _FILES_2022, _MILESTONES_2021FA,
        source="public student solutions of Spring 2023"),
    _md("2023fa", "Fall 2023", "2023fa", _FILES_2023, _MILESTONES_2021FA, batch=5000,
        source="public student solutions of Fall 2023 (stride S, batch 5000)"),
    _md("2024sp", "Spring 2024", "2024sp", _FILES_2024, _MILESTONES_2024,
        source="the Spring 2024 skeleton's readme (Delta/Slurm, 86x86, accuracies 0.86 / 0.886 / 0.8714)"),
    _md("2024fa", "Fall 2024", "2024sp", _FILES_2024, _MILESTONES_2024, baseline=200.0, target=80.0,
        source="public student repositories of Fall 2024 (200 ms baseline, 80 ms target)"),
    _md("2025sp", "Spring 2025", "2024sp", _FILES_2024, _MILESTONES_2024,
        source="public student repositories of Spring 2025"),
)}


def get(name: str | None) -> Edition:
    """The edition called `name` (None: the default); one line listing the known ones otherwise."""
    key = DEFAULT_EDITION if name is None else str(name).strip().lower()
    try:
        return EDITIONS[key]
    except KeyError:
        raise PyconvError(f"unknown edition '{name}' (known: {', '.join(EDITIONS)})") from None


def of_model(model_name: str) -> Edition | None:
    """The first edition whose default model is `model_name` (None for a model no edition ships)."""
    return next((e for e in EDITIONS.values() if e.model == model_name), None)


@dataclass(frozen=True)
class Run:
    """A milestone request read through an edition: what the project runs for `--edition E --m LABEL`."""

    edition: Edition
    label: str  # the milestone as the edition numbered it
    milestone: str  # the project's milestone that does that work
    model: str
    batch: int | str


def resolve(edition: str | None, m, device: str | None = None, model: str | None = None,
            batch: int | str | None = None) -> Run:
    """Read `--m` in the edition's numbering; the model and batch default to the edition's."""
    ed = get(edition)
    ms = ed.milestone(m)
    return Run(ed, ms.label, ms.project_milestone(device), model or ed.model, ed.batch if batch is None else batch)
