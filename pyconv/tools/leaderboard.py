"""`invoke leaderboard`: the class's standings from the grade records, as the course ranked them.

Per milestone: the teams whose verdict is ok ranked by the sum of their conv layers' Op Times (fastest first,
the fastest of their timed runs), with each layer's time, the Correctness at each batch, and how many standard
deviations the sum lies from the class median (negative: faster than the median); the teams with another verdict
below them, unranked, with the verdict and its first line of evidence. Written as Markdown, CSV and a PNG
beside the records (leaderboard-m<M>.md/.csv/.png)."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from ..core import optional
from ..core.errors import PyconvError
from ..core.fileio import atomic_path, write_text_atomic
from ..grading import schema

MILESTONE_ORDER = {m: i for i, m in enumerate(schema.MILESTONES)}


def standings(records: list[dict]) -> tuple[list[dict], float | None, float | None]:
    """Rows in leaderboard order for one milestone's records, and the class median and standard deviation of
    the ok teams' sums (the deviation is the sample one; None with fewer than two ok teams)."""
    ok = sorted((r for r in records if r["verdict"] == "ok"), key=lambda r: (r["sum"], r["team"]))
    rest = sorted((r for r in records if r["verdict"] != "ok"), key=lambda r: (r["verdict"], r["team"]))
    sums = [r["sum"] for r in ok]
    median = statistics.median(sums) if sums else None
    sd = statistics.stdev(sums) if len(sums) >= 2 else None
    rows = []
    for i, r in enumerate(ok, 1):
        z = (r["sum"] - median) / sd if sd else None
        rows.append({"rank": i, "z": z, **r})
    rows += [{"rank": None, "z": None, **r} for r in rest]
    return rows, median, sd


def _batches(rows: list[dict]) -> list[str]:
    seen = []
    for r in rows:
        for b in r["batches"]:
            if str(b) not in seen:
                seen.append(str(b))
    return seen


def _layers(rows: list[dict]) -> int:
    return max((len(r["op_times"]) for r in rows if r["op_times"]), default=0)


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells shared by the Markdown and the CSV."""
    batches, nlayers = _batches(rows), _layers(rows)
    head = (["rank", "team", "members", "sum of Op Times (s)"] + [f"layer {i + 1} (s)" for i in range(nlayers)]
            + [f"Correctness {b}" for b in batches] + ["verdict", "sd from median", "device", "date", "evidence"])
    cells = []
    for r in rows:
        times = r["op_times"] or []
        cells.append([str(r["rank"]) if r["rank"] else "-", r["team"], "; ".join(r["members"]),
                      f"{r['sum']:.6f}" if r["sum"] is not None else "-"]
                     + [f"{times[i]:.6f}" if i < len(times) else "-" for i in range(nlayers)]
                     + [f"{r['correctness'][b]:.4f}" if r["correctness"].get(b) is not None else "-" for b in batches]
                     + [r["verdict"], f"{r['z']:+.2f}" if r["z"] is not None else "-", r["device"],
                        r["date"][:10], (r["evidence"] or [""])[0]])
    return head, cells


def markdown(milestone: str, rows: list[dict], median, sd) -> str:
    head, cells = table(rows)
    esc = [[c.replace("|", "\\|")[:120] for c in row] for row in cells]
    ok = sum(1 for r in rows if r["verdict"] == "ok")
    lines = [f"## Milestone {milestone}", "",
             f"{len(rows)} teams, {ok} ok. Ranked by the sum of the conv layers' Op Times (the fastest of each "
             "team's timed runs)" + (f"; class median {median:.6f} s" if median is not None else "")
             + (f", standard deviation {sd:.6f} s" if sd else "") + ".", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in esc]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
    head, cells = table(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    w.writerows(cells)
    return buf.getvalue()


def plot(milestone: str, rows: list[dict], median, dest: Path) -> Path | None:
    """Horizontal bars of each ranked team's sum, split by layer, with the class median; None without ok teams."""
    ranked = [r for r in rows if r["rank"]]
    if not ranked:
        return None
    matplotlib = optional.require("matplotlib", "the leaderboard's plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.4 * len(ranked)))
    names = [f"{r['rank']}. {r['team']}" for r in ranked][::-1]
    left = [0.0] * len(ranked)
    for li in range(_layers(ranked)):
        widths = [(r["op_times"][li] if li < len(r["op_times"]) else 0.0) * 1e3 for r in ranked][::-1]
        ax.barh(names, widths, left=left, label=f"layer {li + 1}")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    if median is not None:
        ax.axvline(median * 1e3, color="black", linestyle="--", linewidth=1, label="class median")
    failed = len(rows) - len(ranked)
    ax.set_xlabel("sum of Op Times (ms)")
    ax.set_title(f"Milestone {milestone}: {len(ranked)} ranked" + (f", {failed} not (see the table)" if failed else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    with atomic_path(dest, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return dest


def write_leaderboard(grades: Path, milestone: str | None = None, out: Path | None = None,
                      say=print) -> list[Path]:
    records = schema.load_records(grades)
    if milestone is not None:
        milestone = str(milestone).strip().lower()
        if milestone not in schema.MILESTONES:
            raise PyconvError(f"--m must be one of {', '.join(schema.MILESTONES)}, got {milestone!r}")
        records = [r for r in records if r["milestone"] == milestone]
    if not records:
        raise PyconvError(f"no grade records{' for milestone ' + milestone if milestone else ''} in {grades}")
    optional.require("matplotlib", "the leaderboard's plot")  # before any file is written
    out = Path(out) if out else Path(grades)
    written = []
    for m in sorted({r["milestone"] for r in records}, key=MILESTONE_ORDER.get):
        rows, median, sd = standings([r for r in records if r["milestone"] == m])
        md = markdown(m, rows, median, sd)
        written.append(write_text_atomic(out / f"leaderboard-m{m}.md", md))
        written.append(write_text_atomic(out / f"leaderboard-m{m}.csv", to_csv(rows)))
        png = out / f"leaderboard-m{m}.png"
        if plot(m, rows, median, png):
            written.append(png)
        say(md)
    return written
