"""The one exception the native runner's Python side raises."""


class NativeError(RuntimeError):
    """Building or running the native runner failed; the message is one line saying why and what to do."""
