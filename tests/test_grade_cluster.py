"""A Ray cluster of two nodes on this machine (`ray start --head`, then `ray start --address` a second node with
other resources) grades the fixture teams: the jobs spread over both nodes (the placement log names each job's
node), and the records equal those of the embedded local Ray except for the date and the measured times."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from test_grade import EXPECTED, grade_fixture  # tests/ is on sys.path (pytest prepends it)

from pyconv.grading import schema

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_session(sid: int) -> None:
    """Stop one `ray start --block` and every process it started (they share its session): only ours."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def two_node_cluster(tmp_path):
    pytest.importorskip("ray")
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    # Ray 2.59+ authenticates every node and driver of a `ray start` cluster with a shared token
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    port = _free_port()
    address = f"127.0.0.1:{port}"
    temp = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths must stay under 108 bytes
    nodes = []
    try:
        for extra in (["--head", "--port", str(port), "--temp-dir", str(temp), "--include-dashboard", "false",
                       "--resources", '{"head_node": 1}'],
                      ["--address", address, "--resources", '{"second_node": 1}']):
            log = (tmp_path / f"node{len(nodes)}.log").open("w")
            nodes.append(subprocess.Popen(["ray", "start", *extra, "--num-cpus", "1", "--num-gpus", "0",
                                           "--disable-usage-stats", "--block"], stdout=log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True))
            log.close()
            _wait_for_nodes(address, env, len(nodes), nodes[-1], tmp_path / f"node{len(nodes) - 1}.log")
        yield address, env
    finally:
        for p in reversed(nodes):
            _kill_session(p.pid)
            p.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_nodes(address: str, env: dict, n: int, proc, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"`ray start` ended ({proc.returncode}): {log.read_text()[-2000:]}")
        r = subprocess.run(["ray", "status", "--address", address], capture_output=True, text=True, env=env,
                           timeout=60)
        active = r.stdout.split("Pending:")[0].count(" node_")
        if r.returncode == 0 and active >= n:
            return
        time.sleep(2)
    raise AssertionError(f"the Ray cluster at {address} did not reach {n} node(s)")


def test_two_nodes_share_the_jobs_and_the_records_match_the_embedded_run(two_node_cluster, tmp_path):
    address, env = two_node_cluster
    cluster = grade_fixture(tmp_path / "cluster", extra=["--cluster", address],
                            env={**env, "PYCONV_LOGS": str(tmp_path / "cluster-logs")})
    assert cluster.returncode == 0, cluster.stdout + cluster.stderr
    assert "2 node(s)" in cluster.stdout
    placement = json.loads(next((tmp_path / "cluster-logs" / "grades").glob("*/placement.json")).read_text())
    nodes = {p["node"] for p in placement}
    assert len(nodes) == 2, placement  # both nodes ran jobs
    assert {p["team"] for p in placement} == set(EXPECTED)

    local = grade_fixture(tmp_path / "local", env={"PYCONV_LOGS": str(tmp_path / "local-logs")})
    assert local.returncode == 0, local.stdout + local.stderr
    a = {r["team"]: r for r in schema.load_records(tmp_path / "cluster")}
    b = {r["team"]: r for r in schema.load_records(tmp_path / "local")}
    assert {t: r["verdict"] for t, r in a.items()} == EXPECTED
    for team in EXPECTED:
        assert schema.comparable(a[team]) == schema.comparable(b[team]), team
    summary = [f"{p['team']:24s} {p['verdict']:14s} node {p['node'][:12]}" for p in placement]
    (tmp_path / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
