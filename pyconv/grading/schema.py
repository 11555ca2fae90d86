"""The grade record: one JSON file per team and milestone, results/grades/<team>-m<milestone>.json.

Version 3, every key always present (null where a stage was not reached):
    schema       "pyconv-grade"
    version      3 (2 added the signature, 3 the edition and performance grade; older records are refused: grade
                 again)
    team         the team's folder name
    members      names from the team's members.txt (one a line), [] without one
    milestone    "2" | "3" | "4" | "final"
    verdict      "ok" | "wrong" | "build-failed" | "crashed" | "timeout" | "out-of-memory" | "refused" (the team's
                 folder holds what the grader does not read: a symbolic link, a file that is not a regular one)
    stage        where the verdict was decided: "files" (refused) | "build" | "check" (the test shapes) | "run" |
                 "sanitize" | null (ok)
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
    same_as      {file name: [other teams that handed in the identical file]}: flagged, never judged (copying is
                 the teacher's call)
    sandbox      what isolated the team's code: "bwrap", or what ran it without one when the teacher said
                 --no-sandbox ("none: --no-sandbox ...")
    signature    HMAC-SHA256 of the rest of the record under the grader's key (see signing below)

Records are trusted only if the grader wrote them: `invoke grade` signs each with a key kept in the grader's
per-user data folder (0600, covered inside the sandbox), and every reader checks the signature, so a file a job
or anyone else dropped into the grades folder is refused by name, never ranked.

No field depends on how the job was dispatched (embedded Ray, a cluster, or none): two gradings of the same
submissions at the same commit differ only in date, in the measured times (op_times, sum, run_sums), and in
device and host where the machines differ."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import stat
from pathlib import Path

from ..core.errors import PyconvError
from ..core.fileio import write_text_atomic

SCHEMA = "pyconv-grade"
VERSION = 3
VERDICTS = ("ok", "wrong", "build-failed", "crashed", "timeout", "out-of-memory", "refused")
STAGES = ("files", "build", "check", "run", "sanitize", None)
MILESTONES = ("2", "3", "4", "final")
MAX_EVIDENCE = 12
MAX_EVIDENCE_CHARS = 400  # per line: a compiler's template error can be pages long
TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The fields that are measurements or the moment of the run (and the signature over them): the rest is reproducible.
MEASURED = ("date", "op_times", "sum", "performance", "run_sums", "signature")
MAX_RECORD_BYTES = 1 << 20  # a record is a few KiB: anything larger is not one

KEYS = ("schema", "version", "team", "members", "milestone", "verdict", "stage", "evidence", "edition", "model",
        "files", "batches", "correctness", "runs", "op_times", "variants", "sum", "performance", "run_sums",
        "sanitizer", "device", "host", "date", "commit", "same_as", "sandbox", "signature")


def new_record(*, team, members, milestone, model, files, batches, runs, sanitize, device, host, date,
               commit, edition=None) -> dict:
    del sanitize  # the key `sanitizer` is filled by the sanitizer step itself
    return {"schema": SCHEMA, "version": VERSION, "team": team, "members": list(members), "milestone": milestone,
            "verdict": None, "stage": None, "evidence": [], "edition": edition, "model": model, "files": dict(files),
            "batches": list(batches), "correctness": {}, "runs": runs, "op_times": None, "variants": None,
            "sum": None, "performance": None, "run_sums": [], "sanitizer": None, "device": device, "host": host,
            "date": date, "commit": commit, "same_as": {}, "sandbox": "", "signature": ""}


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


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# Each key's type, checked before any value is used: a damaged record ("sum": "inf", a list where a number belongs)
# is named, never an internal error.
_TYPES = {
    "members": (_strings, "a list of names"),
    "evidence": (lambda v: _strings(v) and len(v) <= MAX_EVIDENCE, f"a list of at most {MAX_EVIDENCE} lines"),
    "model": (lambda v: isinstance(v, str), "a string"),
    "files": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in (*v, *v.values())),
              "{file name: sha256}"),
    "batches": (lambda v: isinstance(v, list) and v and all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                                            for b in v), "a non-empty list of batch sizes"),
    "correctness": (lambda v: isinstance(v, dict) and all(_number(c) and 0 <= c <= 1 for c in v.values()),
                    "a fraction per batch"),
    "runs": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a positive integer"),
    "op_times": (lambda v: v is None or (isinstance(v, list) and all(_number(t) and t >= 0 for t in v)),
                 "null or a list of seconds"),
    "variants": (lambda v: v is None or _strings(v), "null or a list of variant names"),
    "sum": (lambda v: v is None or (_number(v) and v >= 0), "null or seconds"),
    "run_sums": (lambda v: isinstance(v, list) and all(_number(t) and t >= 0 for t in v), "a list of seconds"),
    "sanitizer": (lambda v: v is None or isinstance(v, str), "null or a string"),
    "device": (lambda v: isinstance(v, str), "a string"),
    "host": (lambda v: isinstance(v, str), "a string"),
    "date": (lambda v: isinstance(v, str), "a string"),
    "commit": (lambda v: isinstance(v, str), "a string"),
    "same_as": (lambda v: isinstance(v, dict) and all(_strings(t) for t in v.values()), "{file name: [teams]}"),
    "sandbox": (lambda v: isinstance(v, str), "a string"),
    "signature": (lambda v: isinstance(v, str), "a string"),
}


def validate(rec: dict) -> list[str]:
    """Every way `rec` departs from this version of the schema (an empty list: it is a valid record). The signature
    is checked apart (`verify`): this is the record's shape only."""
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
        p.append(f"stage {rec['stage']!r} not one of files, build, check, run, sanitize, null")
    bad = [f"{k} is {_short(rec[k])}, not {what}" for k, (ok, what) in _TYPES.items() if not ok(rec[k])]
    if bad or p:
        return p + bad
    if rec["verdict"] not in ("ok", None) and not rec["evidence"]:
        p.append(f"verdict {rec['verdict']} without evidence")
    if rec["verdict"] == "ok":
        times = rec["op_times"]
        if not times:
            p.append("an ok record needs op_times: a non-empty list of seconds")
        elif rec["sum"] is None or abs(rec["sum"] - sum(times)) > 1e-9 * max(1.0, rec["sum"]):
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


def _short(v) -> str:
    text = json.dumps(v) if not isinstance(v, float) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# --- signing: records are trusted only if the grader wrote them


def key_path() -> Path:
    """The grader's key: $PYCONV_GRADE_KEY_FILE, else the per-user data folder (outside every checkout and grades
    folder a job could see; bwrap covers it too)."""
    env = os.environ.get("PYCONV_GRADE_KEY_FILE")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "pyconv" / "grade-key"


def grader_key(create: bool = False) -> bytes | None:
    """The key (32 random bytes, hex in a 0600 file); made on first use when `create`. None when there is none."""
    path = key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return grader_key(create=False)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        return grader_key(create=False)
    except OSError as e:
        raise PyconvError(f"the grader's key {path}: {e.strerror or e}") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise PyconvError(f"the grader's key {path} must be a regular file only its owner can read (chmod 600)")
        text = f.read(200).strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise PyconvError(f"the grader's key {path} is damaged (delete it: records signed with it are then refused)")
    return key


def _payload(rec: dict) -> bytes:
    body = {k: v for k, v in rec.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def sign(rec: dict, key: bytes) -> dict:
    rec["signature"] = hmac.new(key, _payload(rec), hashlib.sha256).hexdigest()
    return rec


def verify(rec: dict, key: bytes | None) -> str | None:
    """None when the grader signed `rec` as it is; else why it is not trusted."""
    if not rec.get("signature"):
        return "unsigned (not written by `invoke grade`)"
    if key is None:
        return f"signed, but this grader has no key ({key_path()}) to check it with"
    want = hmac.new(key, _payload(rec), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, str(rec["signature"])):
        return "its signature does not match (forged, changed after grading, or signed by another grader's key)"
    return None


def record_path(grades: Path, team: str, milestone: str) -> Path:
    return Path(grades) / f"{team}-m{milestone}.json"


def write_record(grades: Path, rec: dict, key: bytes) -> Path:
    """Sign, then write atomically (temp file + rename): a reader sees the old record or the new one, never half."""
    sign(rec, key)
    return write_text_atomic(record_path(grades, rec["team"], rec["milestone"]),
                             json.dumps(rec, indent=2, sort_keys=False) + "\n")


def read_record(path: Path, key: bytes | None) -> tuple[dict | None, str | None]:
    """(record, None), or (None, why it is refused): only a regular file is opened (never a FIFO, which would
    block, nor a symbolic link), read up to a bound, and trusted only if it parses, fits the schema and carries
    the grader's signature."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return None, "a symbolic link (skipped)" if os.path.islink(path) else f"cannot be read: {e.strerror or e}"
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None, "not a regular file (skipped)"
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        return None, f"larger than {MAX_RECORD_BYTES} bytes: not a grade record"
    try:
        rec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"not JSON ({e})"
    problems = validate(rec)
    if problems:
        return None, f"not a grade record: {problems[0]}"
    why = verify(rec, key)
    if why:
        return None, why
    return rec, None


def read_records(grades: Path, key: bytes | None = None) -> tuple[list[dict], list[tuple[Path, str]]]:
    """(records the grader signed, [(file, why it was refused)]) for every *-m*.json under `grades`, one by one:
    a damaged, forged or odd file is named and skipped, and the rest still read. `key`: the grader's own by
    default."""
    grades = Path(grades)
    if not grades.is_dir():
        raise PyconvError(f"no grades folder {grades} (run `invoke grade` first)")
    if key is None:
        key = grader_key()
    records, refused = [], []
    for path in sorted(grades.glob("*-m*.json")):
        rec, why = read_record(path, key)
        if rec is None:
            refused.append((path, why))
        else:
            records.append(rec)
    return records, refused


def load_records(grades: Path, key: bytes | None = None) -> list[dict]:
    """Every record under `grades`, all of them trusted; the first file that is not is a one-line error naming it."""
    records, refused = read_records(grades, key)
    if refused:
        path, why = refused[0]
        raise PyconvError(f"{path}: {why}")
    return records


def comparable(rec: dict) -> dict:
    """The record without its measurements and date: equal for two gradings of the same code at one commit."""
    return {k: v for k, v in rec.items() if k not in MEASURED}
