"""results/ stays small and readable: `invoke promote` moves a run in and regenerates what it feeds (or changes
nothing), results/ARCHIVE.md finds every removed file in git history, and each plot reads alone (no labels
running together, a title clear of its panels, like compared with like)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess

import pytest
from conftest import ROOT
from test_report import synthetic_result

from pyconv.bench import promote as promote_mod
from pyconv.core.errors import PyconvError
from pyconv.report import tables as report

README = "# P\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n\nafter\n"


def tree(tmp_path):
    folder, runs = tmp_path / "results", tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    old = synthetic_result()
    (folder / "bench-old.json").write_text(json.dumps(old))
    new = synthetic_result()
    new["date"] = "2001-01-01T00:00:00+00:00"
    (runs / "bench-new.json").write_text(json.dumps(new))
    return folder, runs / "bench-new.json", readme


def files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_promote_moves_the_run_and_regenerates_evidence_report_and_summary(tmp_path):
    folder, run, readme = tree(tmp_path)
    dest = promote_mod.promote(run, folder, readme, echo=lambda s: None)
    assert dest == folder / "bench-new.json" and dest.exists() and not run.exists()
    ev = json.loads((folder / "evidence" / "synthetic-gpu.json").read_text())
    sources = {t["source"] for layer in ev["layers"] for t in layer["ranking"]}
    assert sources == {"bench-new.json"}  # the newer run's measurements replace the older one's
    page = (folder / "report.md").read_text()
    assert page.index("[`bench-new.json`](#file-bench-new)") < page.index("[`bench-old.json`](#file-bench-old)")
    text = readme.read_text()
    assert "| measured | on |" in text and "old\n" not in text and text.endswith("\n\nafter\n")
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert pngs and all("bench-new" in n for n in pngs)  # only the newest file of each kind is plotted


@pytest.mark.parametrize("case", ["taken", "name", "not-bench", "readme-markers"])
def test_promote_refuses_with_one_line_and_changes_nothing(tmp_path, case):
    folder, run, readme = tree(tmp_path)
    if case == "taken":
        shutil.copy(run, folder / run.name)
        match = "exists"
    elif case == "name":
        run = run.rename(run.with_name("new.json"))
        match = "bench-\\*.json"
    elif case == "not-bench":
        run.write_text(json.dumps({"hello": 1}))
        match = "bench-new.json"
    else:  # fails after the run was copied in and the evidence and the page rewritten: all of it is undone
        readme.write_text("no markers here\n")
        match = "nothing was changed"
    before, readme_before, run_before = files(folder), readme.read_bytes(), run.read_bytes()
    with pytest.raises(PyconvError, match=match):
        promote_mod.promote(run, folder, readme, echo=lambda s: None)
    assert files(folder) == before and readme.read_bytes() == readme_before and run.read_bytes() == run_before


def test_a_new_bench_run_is_written_outside_what_git_tracks():
    out = subprocess.run(["git", "check-ignore", "results/runs/bench-x.json"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.stdout.strip() == "results/runs/bench-x.json"


def test_results_stay_under_3_mb():
    total = sum(p.stat().st_size for p in (ROOT / "results").rglob("*")
                if p.is_file() and "runs" not in p.relative_to(ROOT / "results").parts)
    assert total <= 3 << 20, f"results/ holds {total / 2**20:.1f} MB: archive what evidence and summary no longer use"


# ------------------------------------------------------------------------------------------------ the archive
ENTRY = re.compile(r"^- `(?P<name>[^`/]+)`\n  sha256 `(?P<sha>[0-9a-f]{64})`\n  removed by `(?P<commit>[0-9a-f]{40})`\n"
                   r"(?P<what>(?:  \S.*\n)+)", re.MULTILINE)


def archive_rows():
    text = (ROOT / "results" / "ARCHIVE.md").read_text()
    rows = [m.groupdict() for m in ENTRY.finditer(text)]
    assert rows, "results/ARCHIVE.md lists no file"
    assert len(rows) == text.count("\n- `"), "an entry of results/ARCHIVE.md is not in the form the others are"
    return rows


def git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True)


def test_every_archived_file_is_gone_from_results_and_has_a_finding():
    for row in archive_rows():
        assert not (ROOT / "results" / row["name"]).exists(), row["name"]
        assert len(row["what"].strip()) > 10, row["name"]


def test_every_archived_file_is_in_git_history_with_its_sha256():
    shallow = git("rev-parse", "--is-shallow-repository")
    if shallow.returncode != 0 or shallow.stdout.strip() != b"false":
        pytest.skip("no full git history here (not a checkout, or a shallow clone)")
    roots = git("rev-list", "--max-parents=0", "HEAD").stdout.split()
    if any(git("cat-file", "-e", f"{r.decode()}:results/ARCHIVE.md").returncode == 0 for r in roots):
        pytest.skip("this history begins after the files were archived (a student handout, a squashed copy)")
    for row in archive_rows():
        if git("cat-file", "-e", f"{row['commit']}^{{commit}}").returncode != 0:
            pytest.fail(f"{row['name']}: commit {row['commit']} is not in this history")
        # the commit removed it: present in its parent, absent in it
        assert git("cat-file", "-e", f"{row['commit']}:results/{row['name']}").returncode != 0, row["name"]
        blob = git("show", f"{row['commit']}^:results/{row['name']}")
        assert blob.returncode == 0, f"{row['name']} is not in the parent of {row['commit']}"
        assert hashlib.sha256(blob.stdout).hexdigest() == row["sha"], row["name"]


# ------------------------------------------------------------------------------------------------ the plots
def overlapping(fig, texts) -> list[tuple[str, str]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text()]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def test_leaderboard_tick_labels_do_not_run_together_at_large_times():
    import matplotlib.pyplot as plt

    leaderboard = pytest.importorskip("pyconv.tools.leaderboard", reason="a student handout has no leaderboard")
    rows = [{"rank": 1, "team": "a", "op_times": [40.0, 60.0]}, {"rank": 2, "team": "b", "op_times": [50.0, 75.0]}]
    fig = leaderboard.figure("2", rows, 112.5)
    try:
        ax = fig.axes[0]
        assert overlapping(fig, ax.get_xticklabels()) == []
        assert ax.get_xlabel() == "sum of Op Times (s)"
    finally:
        plt.close(fig)


def test_roofline_title_is_clear_of_its_first_panel_and_names_the_fp32_floor():
    import matplotlib.pyplot as plt

    r = report.record(synthetic_result())
    groups = [(report._layer_title(layer), [(v.variant, v.pct_roofline or 1.0, report.OURS)
                                            for v in layer.variants if v.ms]) for layer in r.layers]
    fig = report.bar_panels_figure(groups, "% of the FP32 roofline floor", False,
                                   "% of the FP32 roofline floor\nx\ny", ref=(100.0, "FP32 floor (100 %)"))
    try:
        first = fig.axes[0]
        assert overlapping(fig, [fig._suptitle, first.title]) == []
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        assert not fig._suptitle.get_window_extent(renderer).overlaps(first.get_window_extent(renderer))
        assert any(line.get_xdata()[0] == 100.0 for line in first.get_lines())
    finally:
        plt.close(fig)


def test_cpu_plot_compares_per_image_whatever_the_batch(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(report, "_bar_panels", lambda groups, xlabel, *a, **k: seen.append((groups, xlabel)))
    r = report.record(synthetic_result())
    report.plot_files(r, tmp_path / "r")
    groups, xlabel = seen[-1]
    assert xlabel.startswith("ms per image")
    bars = {label: v for _, bars in groups for label, v, _ in bars}
    for row in r.cpu:
        if row.s is not None:
            assert bars[f"{row.variant} (timed at batch {row.B})"] == pytest.approx(row.s.median / row.B * 1e3)


# ------------------------------------------------------------------------------------------------ the README
def test_the_readme_reads_in_five_minutes_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to docs/"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters: {long}"
    # docs/ladder.md is generated by the ladder's own command, with its own test
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)#:]+(?:#[^)]*)?)\)", text)} - {"docs/ladder.md"}
    assert {"docs/errors.md", "docs/teachers.md", "docs/architecture.md", "docs/benchmarks.md"} <= targets
    missing = sorted(t for t in targets if not (ROOT / t).exists())
    assert not missing, f"README.md links to files that do not exist: {missing}"
