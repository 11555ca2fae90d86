"""The grade record: one JSON file per team and milestone, results/grades/<team>-m<milestone>.json.

Version 2, every key always present (null where a stage was not reached):
    schema       "pyconv-grade"
    version      2 (version 1, without edition and performance, still loads: edition null, performance null)
    team         the team's folder name
    members      names from the team's members.txt (one a line), [] without one
    milestone    "2" | "3" | "4" | "final"
    verdict      "ok" | "wrong" | "build-failed" | "crashed" | "timeout" | "out-of-memory"
    stage        where the verdict was decided: "build" | "check" (the test shapes) | "run" | "sanitize" | null (ok)
    evidence     the first lines that explain the verdict (at most 12), [] when ok
    edition      the class's semester (pyconv.core.editions): whose layer shapes were tested, whose targets hold
    model        the model the milestone ran
    files        {file name: sha256} of what the team handed in (what was graded)
    batches      the Correctness batches, the last one timed (the course: 100, 1000, 10000)
    correctness  {"<batch>": Correctness} for each batch reached
    runs         timed runs at the last batch (the course kept the fastest)
    op_times     seconds per conv layer of the fastest timed run, in layer order
    variants     the variant each layer ran (the student's own, as the milestone printed it)
    sum          the sum of op_times: the leaderboard's score
    performance  the edition's performance grade for sum (0..1, linear between its baseline and target), null
                 where the edition set none or the timed batch is not the edition's
    run_sums     the sum of every timed run, in order (the spread behind "fastest of N")
    sanitizer    "memcheck: no errors" when --sanitize ran clean, else null
    device       the GPU (milestones 3, 4, final) or CPU (milestone 2) that ran the job
    host         the machine that ran the job
    date         when the grading run started (UTC, ISO 8601): the same for every job of one run
    commit       the grader's checkout (HEAD, "-dirty" when its tracked files differ)

No field depends on how the job was dispatched (embedded Ray, a cluster, or none): two gradings of the same
submissions at the same commit differ only in date, in the measured times (op_times, sum, run_sums), and in
device and host where the machines differ."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..core.errors import PyconvError
from ..core.fileio import write_text_atomic

SCHEMA = "pyconv-grade"
VERSION = 2
VERDICTS = ("ok", "wrong", "build-failed", "crashed", "timeout", "out-of-memory")
STAGES = ("build", "check", "run", "sanitize", None)
MILESTONES = ("2", "3", "4", "final")
MAX_EVIDENCE = 12
MAX_EVIDENCE_CHARS = 400  # per line: a compiler's template error can be pages long
TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The fields that are measurements or the moment of the run: everything else is reproducible.
MEASURED = ("date", "op_times", "sum", "performance", "run_sums")

KEYS = ("schema", "version", "team", "members", "milestone", "verdict", "stage", "evidence", "edition", "model",
        "files", "batches", "correctness", "runs", "op_times", "variants", "sum", "performance", "run_sums",
        "sanitizer", "device", "host", "date", "commit")


def new_record(*, team, members, milestone, model, files, batches, runs, sanitize, device, host, date,
               commit, edition=None) -> dict:
    del sanitize  # the key `sanitizer` is filled by the sanitizer step itself
    return {"schema": SCHEMA, "version": VERSION, "team": team, "members": list(members), "milestone": milestone,
            "verdict": None, "stage": None, "evidence": [], "edition": edition, "model": model, "files": dict(files),
            "batches": list(batches), "correctness": {}, "runs": runs, "op_times": None, "variants": None,
            "sum": None, "performance": None, "run_sums": [], "sanitizer": None, "device": device, "host": host,
            "date": date, "commit": commit}


def finish(rec: dict, verdict: str, stage: str | None, evidence: list[str]) -> dict:
    """Set the verdict; keep the evidence short (lines, characters). A verdict other than ok has no score."""
    rec["verdict"], rec["stage"] = verdict, stage
    lines = [ln.rstrip() for ln in evidence if ln.strip()][:MAX_EVIDENCE]
    rec["evidence"] = [ln if len(ln) <= MAX_EVIDENCE_CHARS else ln[:MAX_EVIDENCE_CHARS] + " [...]" for ln in lines]
    if verdict != "ok":
        rec["op_times"] = rec["variants"] = rec["sum"] = rec["performance"] = None
    problems = validate(rec)
    if problems:
        raise AssertionError(f"grade record of {rec.get('team')} breaks its schema: {'; '.join(problems)}")
    return rec


def validate(rec: dict) -> list[str]:
    """Every way `rec` departs from version 1 of the schema (an empty list: it is a valid record)."""
    p = []
    if not isinstance(rec, dict):
        return ["not a JSON object"]
    missing = [k for k in KEYS if k not in rec]
    extra = [k for k in rec if k not in KEYS]
    if missing:
        p.append(f"missing {', '.join(missing)}")
    if extra:
        p.append(f"unknown {', '.join(extra)}")
    if missing:
        return p
    if rec["schema"] != SCHEMA or rec["version"] != VERSION:
        p.append(f"schema/version {rec['schema']!r}/{rec['version']!r}, expected {SCHEMA!r}/{VERSION}")
    if not isinstance(rec["team"], str) or not TEAM_NAME.match(rec["team"]):
        p.append(f"team {rec['team']!r} is not a folder name of letters, digits, '.', '_', '-'")
    if rec["milestone"] not in MILESTONES:
        p.append(f"milestone {rec['milestone']!r} not one of {', '.join(MILESTONES)}")
    if rec["verdict"] not in VERDICTS:
        p.append(f"verdict {rec['verdict']!r} not one of {', '.join(VERDICTS)}")
    if rec["stage"] not in STAGES:
        p.append(f"stage {rec['stage']!r} not one of build, check, run, sanitize, null")
    if not isinstance(rec["evidence"], list) or len(rec["evidence"]) > MAX_EVIDENCE:
        p.append(f"evidence must be a list of at most {MAX_EVIDENCE} lines")
    elif rec["verdict"] not in ("ok", None) and not rec["evidence"]:
        p.append(f"verdict {rec['verdict']} without evidence")
    if rec["verdict"] == "ok":
        times = rec["op_times"]
        if not (isinstance(times, list) and times and all(isinstance(t, (int, float)) and t >= 0 for t in times)):
            p.append("an ok record needs op_times: a non-empty list of seconds")
        elif not isinstance(rec["sum"], (int, float)) or abs(rec["sum"] - sum(times)) > 1e-9 * max(1.0, rec["sum"]):
            p.append("sum is not the sum of op_times")
        if len(rec["run_sums"]) != rec["runs"]:
            p.append(f"{len(rec['run_sums'])} run_sums for runs={rec['runs']}")
        if set(rec["correctness"]) != {str(b) for b in rec["batches"]}:
            p.append("an ok record needs a Correctness for every batch")
    elif rec["sum"] is not None:
        p.append(f"a {rec['verdict']} record has no sum")
    perf = rec["performance"]
    if perf is not None and not (isinstance(perf, (int, float)) and 0 <= perf <= 1 and rec["sum"] is not None):
        p.append(f"performance {perf!r} is not a grade 0..1 of a scored record")
    for b, c in rec["correctness"].items():
        if not (isinstance(c, (int, float)) and 0 <= c <= 1):
            p.append(f"correctness at {b} is {c!r}, not a fraction")
    return p


def record_path(grades: Path, team: str, milestone: str) -> Path:
    return Path(grades) / f"{team}-m{milestone}.json"


def write_record(grades: Path, rec: dict) -> Path:
    """Write atomically (temp file + rename): a reader sees the old record or the new one, never half of one."""
    return write_text_atomic(record_path(grades, rec["team"], rec["milestone"]),
                             json.dumps(rec, indent=2, sort_keys=False) + "\n")


def load_records(grades: Path) -> list[dict]:
    """Every record under `grades`; a file that is not a valid record is a one-line error naming it."""
    grades = Path(grades)
    if not grades.is_dir():
        raise PyconvError(f"no grades folder {grades} (run `invoke grade` first)")
    out = []
    for path in sorted(grades.glob("*-m*.json")):
        try:
            rec = json.loads(path.read_text())
        except ValueError as e:
            raise PyconvError(f"{path} is not JSON: {e}") from None
        if isinstance(rec, dict) and rec.get("version") == 1 and rec.get("schema") == SCHEMA:
            rec = {**rec, "version": VERSION, "edition": None, "performance": None}  # before editions
        problems = validate(rec)
        if problems:
            raise PyconvError(f"{path} is not a grade record: {problems[0]}")
        out.append(rec)
    return out


def comparable(rec: dict) -> dict:
    """The record without its measurements and date: equal for two gradings of the same code at one commit."""
    return {k: v for k, v in rec.items() if k not in MEASURED}
