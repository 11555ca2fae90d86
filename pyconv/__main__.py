"""The `pyconv` command (and `python -m pyconv`): the project's Invoke tasks (pyconv/cli/tasks.py) shipped as a
program the way Invoke ships one, an invoke.Program over their collection; runs from any folder."""

from __future__ import annotations

from invoke import Collection, Exit, Program

from . import __version__


class PyconvProgram(Program):
    def print_help(self) -> None:
        from .core import paths

        super().print_help()
        print(paths.describe())
        print("A task's own flags: pyconv <task> --help. Exit status: 0 done, 1 an error (one line), 2 a usage error.")
        print()

    def execute(self) -> None:
        try:
            super().execute()
        except Exit as e:
            # The tasks' advice names the checkout's command (`invoke data`); this program is `pyconv`.
            if e.message:
                e.message = e.message.replace("`invoke ", "`pyconv ")
            raise


def main(argv: list[str] | None = None) -> None:
    from .cli import tasks

    PyconvProgram(namespace=Collection.from_module(tasks), name="pyconv", binary="pyconv",
                  version=__version__).run(argv)


if __name__ == "__main__":
    main()
