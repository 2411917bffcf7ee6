"""The error every stage raises for bad input or usage, so the command line answers it the same way (exit 2)."""


class UsageError(ValueError):
    """Bad input or usage: the run refuses to start (exit code 2)."""
