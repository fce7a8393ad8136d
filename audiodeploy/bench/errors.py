"""The one error type of ``audiodeploy bench``: a problem the user can act on, said in one line."""

from audiodeploy.errors import AudiodeployError


class BenchError(AudiodeployError):
    """A benchmark that cannot be run or measured as asked; the message names the problem and what to do.

    Raised before any result is written: a run that fails leaves no results file behind.
    """
