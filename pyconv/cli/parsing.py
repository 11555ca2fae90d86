"""How the command line parses: Invoke's parser, adjusted here and nowhere else.

- Integer options (a task's `ints={name: (lo, hi)}`) are typed INT in `--help`, read as ASCII integers only (Python's
  int() also takes "1_000", " 7 " and other scripts' digits) and checked against their range before the task runs.
- A one-letter option is spelled `--m`, as the course wrote it (Invoke would spell it `-m` only); `-m` still works.
- A usage error (an unknown flag, a missing value or required flag, an integer option that is not one or is out of
  its range) is one line on stderr and exit status 2, as for other Unix commands; every other error keeps its own
  status (1 for the project's errors)."""

from __future__ import annotations

import functools
import re

import invoke
from invoke import Exit, ParseError
from invoke.parser import Argument, Parser, ParserContext

from ..core.checks import MAX_BATCH, as_int

__all__ = ["MAX_BATCH", "USAGE", "PyconvTask", "UsageError", "check_int", "task"]

USAGE = 2  # exit status of a usage error


class UsageError(Exit):
    """A malformed command line: one line, exit status 2."""

    def __init__(self, message: str):
        super().__init__(f"error: {message}", code=USAGE)


def int_message(flag: str, lo: int | None, hi: int | None, value) -> str:
    if lo is not None and hi is not None:
        return f"{flag} must be an integer between {lo} and {hi}, got {value!r}"
    if lo is not None:
        return f"{flag} must be an integer >= {lo}, got {value!r}"
    return f"{flag} must be an integer, got {value!r}"


def check_int(flag: str, value, lo: int | None, hi: int | None) -> int:
    """value as an int within lo..hi (either may be None: unbounded), else UsageError."""
    try:
        n = as_int(value)
    except (TypeError, ValueError):
        raise UsageError(int_message(flag, lo, hi, value)) from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise UsageError(int_message(flag, lo, hi, n))
    return n


def flag_of(name: str) -> str:
    return f"--{name.replace('_', '-')}"


class PyconvTask(invoke.Task):
    """An Invoke task with typed, range-checked integer options (ints={python_name: (lo, hi)}, either bound None
    for none) and older spellings of a flag kept working (also={python_name: (old_name, ...)})."""

    def __init__(self, body, ints: dict | None = None, also: dict | None = None, **kwargs):
        self.ints = dict(ints or {})
        self.also = dict(also or {})
        super().__init__(body, **kwargs)

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        if name in self.ints:
            opts["kind"] = int
        opts["names"] = [*opts["names"], *self.also.get(name, ())]
        return opts

    def get_arguments(self, *args, **kwargs):
        arguments = super().get_arguments(*args, **kwargs)
        for arg in arguments:
            key = arg.attr_name or arg.name
            if key in self.ints:
                arg.pyconv_range = self.ints[key]  # read by _set_value to word a non-integer's message
        return arguments

    def __call__(self, *args, **kwargs):
        for name, (lo, hi) in self.ints.items():
            if kwargs.get(name) is not None:
                kwargs[name] = check_int(flag_of(name), kwargs[name], lo, hi)
        return super().__call__(*args, **kwargs)


task = functools.partial(invoke.task, klass=PyconvTask)


def _install() -> None:
    if getattr(ParserContext.add_arg, "_pyconv", False):
        return
    add_arg, set_value, parse_argv = ParserContext.add_arg, Argument.set_value, Parser.parse_argv

    def add_arg_long_single_letter(self, *args, **kwargs):
        add_arg(self, *args, **kwargs)
        if not self.name:  # Invoke's own options (-h, -l, ...) keep their spelling
            return
        for arg in list(self.args.values()):
            main = arg.names[0]
            if len(main) == 1 and f"-{main}" in self.flags.keys():
                del self.flags[f"-{main}"]
                self.flags[f"--{main}"] = arg
                for name in (main, *arg.nicknames):
                    self.flags.alias(f"-{name}" if len(name) == 1 else f"--{name}", to=f"--{main}")

    def set_value_ascii_int(self, value, cast=True):
        if cast and self.kind is int and not isinstance(value, int):
            lo, hi = getattr(self, "pyconv_range", (None, None))
            try:
                value = as_int(value)
            except (TypeError, ValueError):
                raise ParseError(int_message(flag_of(self.name), lo, hi, value)) from None
        return set_value(self, value, cast=cast)

    def parse_argv_usage_status(self, argv):
        try:
            return parse_argv(self, argv)
        except ParseError as e:
            # Invoke names a flag that lacks its value by the Argument's repr: say the flag instead
            text = re.sub(r"^Flag <Argument: ([\w-]+)[^>]*> needed value and was not given one!$",
                          lambda m: f"{flag_of(m.group(1))} needs a value", str(e))
            raise UsageError(text) from None

    for fn in (add_arg_long_single_letter, set_value_ascii_int, parse_argv_usage_status):
        fn._pyconv = True
    ParserContext.add_arg = add_arg_long_single_letter
    Argument.set_value = set_value_ascii_int
    Parser.parse_argv = parse_argv_usage_status


_install()
