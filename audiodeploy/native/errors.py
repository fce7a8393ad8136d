"""The one exception the native runner's Python side raises."""

from audiodeploy.errors import AudiodeployError


class NativeError(AudiodeployError, RuntimeError):
    """Building or running the native runner failed; the message is one line saying why and what to do."""
