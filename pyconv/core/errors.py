"""The one exception users see. Tasks catch it and print its message on one line (no traceback)."""


class PyconvError(Exception):
    """A problem the user can act on: bad input, missing data, an unknown name. The message says which."""
