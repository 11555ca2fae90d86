"""The one exception users see. Tasks catch it and print its message on one line (no traceback)."""


class PyconvError(Exception):
    """A problem the user can act on: bad input, missing data, an unknown name. The message says which."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process is, so that every `finally` and every temporary file's
    cleanup runs as for Ctrl-C (a KeyboardInterrupt) instead of the process vanishing mid-write."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def one_line(text) -> str:
    """`text` as one printable line: line breaks, tabs, ANSI escapes and other control characters become their
    backslash escapes, so a message quoting a hostile name cannot break the one-line promise or drive the
    terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
