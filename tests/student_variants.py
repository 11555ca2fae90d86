"""Student variants (cpu-student, gpu-student) in tests that run every registered variant.

While a slot still holds the course's skeleton, the student's forward() stops at the skeleton's own CHECK; such a
test skips with that sentence instead of failing. A student's finished file is tested like any other variant, and
its failures (a shape it hard-codes, a wrong index) are real failures.

    from student_variants import skip_if_unstarted
    skip_if_unstarted(name, _cpu.conv)        # or _gpu.conv, first thing in the test
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import numpy as np
import pytest

from pyconv.variants import is_student

# The probe of gpu-student runs in a child first: a student's kernel can kill the process (a fault the CUDA
# runtime reports as a signal), and that must fail one test, not end the session.
_PROBE = """
import numpy as np
from pyconv import native
g = native.gpu()
try:
    g.conv('gpu-student', np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32))
except RuntimeError as e:
    print(' '.join(str(e).split()))
"""


@functools.lru_cache(maxsize=None)
def _probe_gpu_in_child() -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    return r.returncode, (r.stdout + r.stderr).strip()

# Both skeletons' sentences: "... replace it with your implementation." (new-forward.h, the general template) and
# "... replace with your implementation" (new-forward.cuh's float specialisation).
SKELETON = re.compile(r"Check failed: 0 == 1 \(0 vs\. 1\): Remove this line and replace (it )?with your implementation")


def skip_if_unstarted(name: str, conv) -> None:
    """Runs conv(name, x, k) on a 1x1 problem when `name` is a student variant; skips the calling test when the
    slot still holds the course's skeleton. Any other error propagates."""
    if not is_student(name):
        return
    if name == "gpu-student":
        code, text = _probe_gpu_in_child()
        if code < 0:
            pytest.fail(f"gpu-student killed its process with signal {-code} on a 1x1 convolution: {text[-500:]}")
        if code == 0 and SKELETON.search(text):
            pytest.skip(f"{name}: the slot still holds the course's skeleton ({text})")
    try:
        conv(name, np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32))
    except RuntimeError as e:
        if SKELETON.search(str(e)):
            pytest.skip(f"{name}: the slot still holds the course's skeleton ({e})")
        raise
