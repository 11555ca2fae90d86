"""The command line: Invoke tasks, shipped as the `pyconv` program (pyconv.__main__) and run as `invoke <task>` in
a checkout, parsed as pyconv.cli.parsing says."""
