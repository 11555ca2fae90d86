"""Grading submissions: the course's rai system rebuilt on Ray.

    schema.py   the grade record (one JSON file per team and milestone) and its checks
    sandbox.py  one step of one job: limits, its own process group, the wall-clock kill, optional bwrap/unshare
    job.py      one team x one milestone: build, correctness, timing, sanitizer -> a verdict and a record
    shapes.py   run inside a job (the node's checkout, the team's build): its variant at the test shapes
    dispatch.py run jobs on Ray (an embedded local Ray, or a running cluster), or one after another without Ray

Apart from shapes.py, which runs inside a job, this package imports nothing from the rest of pyconv except its
error and file helpers (so Ray ships it to a node alone): a job runs the project
through its command line (`python3 -m invoke -r ROOT build --student ...`), in a child process, so a student's
crash never takes the grader down with it."""
