"""`invoke leaderboard`: the class's standings from the grade records, as the course ranked them.

Per milestone: the teams whose verdict is ok ranked by the sum of their conv layers' Op Times (fastest first,
the fastest of their timed runs), with each layer's time, the Correctness at each batch, and how many standard
deviations the sum lies from the class median (negative: faster than the median), and the edition's performance
grade where it set targets (pyconv.core.editions.performance_grade, kept in the record); the teams with another
verdict below them, unranked, with the verdict and its first line of evidence. Written as Markdown, CSV and a PNG
beside the records (leaderboard-m<M>.md/.csv/.png).

Only records the grader signed are read (pyconv.grading.schema): a damaged, forged or unsigned file, or one that
is not a regular file (a FIFO would block the reader), is named in one line and left out; the rest are ranked.
Every cell a team controls (members, evidence, the device its run reported) is written so that it cannot act:
in the CSV a cell that starts with = + - @ tab or CR gets a leading ' (as spreadsheet-safe CSV writers do, after
OWASP's "CSV injection"); in the Markdown, pipes, backticks, emphasis, brackets and HTML are escaped."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from ..core import optional
from ..core.errors import PyconvError, one_line
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


def notes(rec: dict) -> str:
    """What the teacher should look at: files identical to another team's, and a team graded without a sandbox."""
    out = [f"{name} identical to {', '.join(teams)}'s" for name, teams in sorted(rec["same_as"].items()) if teams]
    if rec["sandbox"] != "bwrap" and rec["verdict"] != "refused":
        out.append(f"sandbox: {rec['sandbox']}")
    return "; ".join(out)


# The columns whose text comes from a team (its members.txt, its program's output): neutralised on the way out.
TEAM_TEXT = ("members", "device", "evidence", "notes")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: str) -> str:
    """A CSV cell a spreadsheet shows as text, never runs: a leading ' before = + - @ tab CR (OWASP)."""
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def markdown_safe(cell: str, width: int = 120) -> str:
    """A Markdown table cell that stays one cell of plain text: one line, at most `width` characters of the
    original, with Markdown's and HTML's active characters escaped."""
    text = one_line(cell.replace("\t", " "))[:width]
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\|`*_[]":
        text = text.replace(ch, "\\" + ch)
    return text


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells shared by the Markdown and the CSV."""
    batches, nlayers = _batches(rows), _layers(rows)
    head = (["rank", "team", "members", "sum of Op Times (s)"] + [f"layer {i + 1} (s)" for i in range(nlayers)]
            + [f"Correctness {b}" for b in batches]
            + ["verdict", "performance", "sd from median", "edition", "device", "date", "evidence", "notes"])
    cells = []
    for r in rows:
        times = r["op_times"] or []
        cells.append([str(r["rank"]) if r["rank"] else "-", r["team"], "; ".join(r["members"]),
                      f"{r['sum']:.6f}" if r["sum"] is not None else "-"]
                     + [f"{times[i]:.6f}" if i < len(times) else "-" for i in range(nlayers)]
                     + [f"{r['correctness'][b]:.4f}" if r["correctness"].get(b) is not None else "-" for b in batches]
                     + [r["verdict"], f"{r['performance']:.0%}" if r["performance"] is not None else "-",
                        f"{r['z']:+.2f}" if r["z"] is not None else "-", r["edition"] or "-", r["device"],
                        r["date"][:10], (r["evidence"] or [""])[0], notes(r)])
    return head, cells


def markdown(milestone: str, rows: list[dict], median, sd, refused=()) -> str:
    head, cells = table(rows)
    esc = [[markdown_safe(c) for c in row] for row in cells]
    ok = sum(1 for r in rows if r["verdict"] == "ok")
    lines = [f"## Milestone {milestone}", "",
             f"{len(rows)} teams, {ok} ok. Ranked by the sum of the conv layers' Op Times (the fastest of each "
             "team's timed runs)" + (f"; class median {median:.6f} s" if median is not None else "")
             + (f", standard deviation {sd:.6f} s" if sd else "") + ".", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in esc]
    if refused:
        lines += ["", f"Not ranked: {len(refused)} file(s) in the grades folder that the grader did not sign or "
                  "cannot read as records:", ""]
        lines += [f"- {markdown_safe(path.name, 80)}: {markdown_safe(why, 200)}" for path, why in refused]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
    head, cells = table(rows)
    guarded = [i for i, h in enumerate(head) if h in TEAM_TEXT]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    # one line per row too: a CR or LF inside a team's cell becomes its escape (the csv module would leave a lone
    # CR unquoted, splitting the row for many readers)
    w.writerows([one_line(spreadsheet_safe(c)) if i in guarded else c for i, c in enumerate(row)] for row in cells)
    return buf.getvalue()


def plot(milestone: str, rows: list[dict], median, dest: Path) -> Path | None:
    """Horizontal bars of each ranked team's sum, split by layer, with the class median; None without ok teams."""
    fig = figure(milestone, rows, median)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    with atomic_path(dest, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return dest


def figure(milestone: str, rows: list[dict], median):
    """The leaderboard's matplotlib figure (plot's), or None without ranked teams."""
    ranked = [r for r in rows if r["rank"]]
    if not ranked:
        return None
    matplotlib = optional.require("matplotlib", "the leaderboard's plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.4 * len(ranked)))
    names = [f"{r['rank']}. {r['team']}" for r in ranked][::-1]
    # seconds where a sum reaches 10 s: tick labels stay short enough not to run together
    longest = max(sum(r["op_times"]) for r in ranked)
    scale, unit = (1.0, "s") if longest >= 10 else (1e3, "ms")
    left = [0.0] * len(ranked)
    for li in range(_layers(ranked)):
        widths = [(r["op_times"][li] if li < len(r["op_times"]) else 0.0) * scale for r in ranked][::-1]
        ax.barh(names, widths, left=left, label=f"layer {li + 1}")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    if median is not None:
        ax.axvline(median * scale, color="black", linestyle="--", linewidth=1, label="class median")
    failed = len(rows) - len(ranked)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    ax.set_xlabel(f"sum of Op Times ({unit})")
    ax.set_title(f"Milestone {milestone}: {len(ranked)} ranked" + (f", {failed} not (see the table)" if failed else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    return fig


def write_leaderboard(grades: Path, milestone: str | None = None, out: Path | None = None,
                      say=print) -> list[Path]:
    optional.require("matplotlib", "the leaderboard's plot")  # first: before anything is read or written
    records, refused = schema.read_records(grades)
    for path, why in refused:
        say(f"refused {path}: {one_line(why)}")
    if milestone is not None:
        milestone = str(milestone).strip().lower()
        if milestone not in schema.MILESTONES:
            raise PyconvError(f"--m must be one of {', '.join(schema.MILESTONES)}, got {milestone!r}")
        records = [r for r in records if r["milestone"] == milestone]
    if not records:
        raise PyconvError(f"no grade records{' for milestone ' + milestone if milestone else ''} in {grades}"
                          + (f" that the grader signed ({len(refused)} refused, named above)" if refused else ""))
    out = Path(out) if out else Path(grades)
    written = []
    for m in sorted({r["milestone"] for r in records}, key=MILESTONE_ORDER.get):
        rows, median, sd = standings([r for r in records if r["milestone"] == m])
        md = markdown(m, rows, median, sd, refused)
        written.append(write_text_atomic(out / f"leaderboard-m{m}.md", md))
        written.append(write_text_atomic(out / f"leaderboard-m{m}.csv", to_csv(rows)))
        png = out / f"leaderboard-m{m}.png"
        if plot(m, rows, median, png):
            written.append(png)
        say(md)
    return written
