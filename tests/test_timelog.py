"""The /usr/bin/time-style block: formatted from the child's real rusage, parsed back, logged atomically."""

import sys

import pytest

from pyconv.tools import timelog


def test_elapsed_format():
    assert timelog.format_elapsed(1.994) == "0:01.99"
    assert timelog.format_elapsed(75.5) == "1:15.50"
    assert timelog.format_elapsed(3725.25) == "1:02:05.25"


def test_gnu_block_round_trip():
    rec = timelog.TimeRecord(user=4.4, system=2.85, elapsed=1.99, maxresident_kb=332360, avgtext_kb=0, avgdata_kb=0,
                             inputs=0, outputs=28240, major=0, minor=110723, swaps=0, exit_status=0)
    text = rec.gnu()
    assert text == ("4.40user 2.85system 0:01.99elapsed 364%CPU (0avgtext+0avgdata 332360maxresident)k\n"
                    "0inputs+28240outputs (0major+110723minor)pagefaults 0swaps")
    back = timelog.parse_gnu(text)
    assert back["user"] == 4.4 and back["system"] == 2.85 and back["elapsed"] == pytest.approx(1.99)
    assert back["maxresident_kb"] == 332360 and back["minor"] == 110723 and back["cpu_percent"] == 364


def test_posix_block_round_trip():
    rec = timelog.TimeRecord(1.5, 0.25, 2.0, 1, 0, 0, 0, 0, 0, 0, 0, 3)
    text = rec.posix()
    assert text.startswith("Command exited with non-zero status 3\nreal 2.00\nuser 1.50\nsys 0.25")
    assert timelog.parse_posix(text) == {"real": 2.0, "user": 1.5, "sys": 0.25}


def test_parse_rejects_garbage():
    with pytest.raises(ValueError):
        timelog.parse_gnu("nothing here")


@pytest.mark.parametrize("posix", [False, True])
def test_run_timed_measures_a_real_child(tmp_path, monkeypatch, posix, capsys):
    monkeypatch.setattr(timelog.paths, "LOGS", tmp_path)
    # The child burns ~0.3 s of CPU and touches ~64 MB: user time and max RSS must show it.
    code = "import time\nt=time.process_time()\nb=bytearray(64<<20)\nwhile time.process_time()-t<0.3: pass\nprint('child says hi')"
    rc, log, rec = timelog.run_timed([sys.executable, "-c", code], tag="t", posix=posix)
    assert rc == 0 and log.parent == tmp_path
    text = log.read_text()
    assert text.startswith("child says hi\n")
    assert rec.user + rec.system >= 0.25 and rec.elapsed >= (rec.user + rec.system) * 0.9 and rec.maxresident_kb > 60 * 1024
    if posix:
        assert timelog.parse_posix(text)["user"] == pytest.approx(rec.user, abs=0.01)
    else:
        assert timelog.parse_gnu(text)["maxresident_kb"] == rec.maxresident_kb
    assert "child says hi" in capsys.readouterr().out


def test_failing_child_status_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(timelog.paths, "LOGS", tmp_path)
    rc, log, _ = timelog.run_timed([sys.executable, "-c", "raise SystemExit(7)"], tag="t")
    assert rc == 7 and timelog.parse_gnu(log.read_text())["exit_status"] == 7


def test_two_runs_get_two_logs(tmp_path, monkeypatch):
    monkeypatch.setattr(timelog.paths, "LOGS", tmp_path)
    logs = {timelog.run_timed([sys.executable, "-c", "pass"], tag="same")[1] for _ in range(2)}
    assert len(logs) == 2 and all(p.exists() for p in logs)
    assert not list(tmp_path.glob(".*tmp")), "temporary files left behind"
