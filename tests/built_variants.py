"""The variants of this build, for tests. A test takes variant names from the registry (pyconv.variants), never from
a list of its own, so that the same suite passes in the project and in a student handout (`invoke handout`), whose
only variants of its own are the student's (cpu-student, gpu-student):
- a test of "every CPU (GPU) variant" parametrizes over CPU (GPU): in a handout that is the student's variant, which
  skips while its slot holds the course's skeleton and is tested like any other once it does not
  (student_variants.skip_if_unstarted);
- a test that needs a correct convolution, not a particular one, runs M2_PICK (CPU) or M3_PICK (GPU): the
  milestone's own pick in this build;
- a test of one ladder variant's own behaviour is marked needs("cpu-fast", ...): it skips, naming the variant,
  where the build lacks it (a handout leaves the ladder's files out: they are the assignment).

    from built_variants import CPU, M2_PICK, needs
"""

from __future__ import annotations

import pytest

from pyconv import native, variants


def _registry(device: str) -> list[variants.Variant]:
    if device == "cpu":  # always built: a module that does not load fails the session, loudly
        return variants.cpu_variants(with_reference=False)
    try:
        return variants.gpu_variants()
    except (native.NotBuilt, native.LoadFailed):  # as gpu_helpers: the GPU tests then skip, saying why
        return []


CPU_VARIANTS = _registry("cpu")
GPU_VARIANTS = _registry("gpu")
CPU = [v.name for v in CPU_VARIANTS]  # this build's native CPU variants, ladder order (not the numpy reference)
GPU = [v.name for v in GPU_VARIANTS]  # its GPU variants ([] where pyconv._gpu is not built)


def _pick(vs: list[variants.Variant], milestone: str) -> str | None:
    """The milestone's default in this build (ladder order), else None: the variant a milestone runs without --impl
    when the build has one of its own (pyconv.plan), never the student's."""
    return next((v.name for v in vs if v.role(milestone).role == "default"), None)


# Milestone 2's default (cpu-fast in the project), else the numpy reference: a handout's only own CPU variant is the
# student's, which the tests of the engine, the framework and the tools must not depend on.
M2_DEFAULT = _pick(CPU_VARIANTS, "2")
M2_PICK = M2_DEFAULT or variants.NUMPY.name
# Milestone 3's default (gpu-baseline in the project), or None: a handout has no GPU variant but the student's.
M3_PICK = _pick(GPU_VARIANTS, "3")


def needs(*names: str):
    """Skip where this build lacks any of these variants (a student handout: the ladder is the assignment)."""
    missing = [n for n in names if n not in CPU and n not in GPU]
    named = ", ".join(missing[:3]) + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else "")
    return pytest.mark.skipif(bool(missing), reason=f"this build has no {named} (a student handout leaves the "
                                                    "ladder's variants out: they are the assignment)")


needs_m3_pick = pytest.mark.skipif(M3_PICK is None, reason="this build has no milestone-3 default of its own (a "
                                                           "student handout: the GPU variants are the assignment)")


# final chooses among the variants whose final role is default or candidate, measuring a shape it has never seen;
# a handout has none (its only GPU variant is the student's, on request): final runs that one, measuring nothing.
needs_final_choice = pytest.mark.skipif(not any(v.role("final").choosable for v in GPU_VARIANTS),
                                        reason="this build has no variant final chooses between (a student "
                                               "handout: final runs the student's, measuring nothing)")
