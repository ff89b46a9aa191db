"""What every command line shares at its edge: a reader that went away (`... | head`)."""

from __future__ import annotations

import os
import sys

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what `cat` ends with when its reader is gone


def broken_pipe() -> int:
    """Standard output's reader closed the pipe (`storage get URL | head`): stop without a
    traceback, as `cat` does. stdout is pointed at /dev/null first, or Python's flush at exit
    raises the same error again ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to flush at exit
        pass
    return EXIT_BROKEN_PIPE
