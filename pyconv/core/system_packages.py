"""The Debian packages the project uses beyond Python's, installed in one place: `invoke setup` installs every
missing one (as root, where apt-get exists), `invoke data` the data set's alone.

    dataset-fashion-mnist   Fashion-MNIST's four files under /usr/share/datasets/fashion-mnist
    bubblewrap              bwrap, the sandbox `invoke grade` runs each team's code in (it refuses to run
                            without one unless told --no-sandbox)

Elsewhere (not root, no apt-get) nothing is installed: `invoke setup` says in one line what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

# package -> how to tell it is there (what the project uses of it, not the package database: a bwrap built from
# source counts)
PACKAGES: dict[str, Callable[[], bool]] = {
    "dataset-fashion-mnist": FASHION_MNIST_DIR.is_dir,
    "bubblewrap": lambda: shutil.which("bwrap") is not None,
}


def missing() -> list[str]:
    return [name for name, present in PACKAGES.items() if not present()]


def can_install() -> bool:
    return os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get") is not None


def install(packages: list[str]) -> bool:
    """apt-get install the packages in one call (updating the package index once if that fails: it may be stale
    on a fresh machine); True when apt-get succeeded. Nothing is tried without root and apt-get."""
    if not packages or not can_install():
        return False
    argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing the Debian package(s) {', '.join(packages)} ...", flush=True)
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
    return r.returncode == 0


def ensure(say=print) -> list[str]:
    """Install what is missing where possible; say in one line what is still missing; return it."""
    absent = missing()
    if absent:
        install(absent)
        absent = missing()
    if absent:
        say(f"not installed: {', '.join(absent)} (as root: apt-get install {' '.join(absent)}); "
            "bubblewrap is the sandbox `invoke grade` needs, dataset-fashion-mnist a local copy of the data set")
    return absent
