"""What the command line turns into one line and an exit status instead of a traceback. Kept
apart from run.py so that commands that only read results start without importing torch."""


class UsageError(Exception):
    """Bad input from the caller: the message says what and how to fix it."""


class StoreFailed(Exception):
    """A result could not be written: the run stops, with what it wrote so far kept."""
