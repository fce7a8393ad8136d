"""XNNPACK's weight cache, on while audiodeploy's runtime loads a program.

Without the cache, XNNPACK packs a constant once for each operator that reads it. An LSTM unrolled over EnCodec's
75 frames read its 4 MiB recurrent weights 148 times: 148 packed copies (596 MiB resident), each step reading a
cold one, 38 ms for a second of audio against 22 ms with the cache (measured on this project's AMD EPYC, 2
threads). The native runner turns it on through ExecuTorch's C++ API. The Python extension of ExecuTorch 1.5.1
takes no backend options, so this module calls the same public C++ function, ``executorch::runtime::set_option``,
in the ``libexecutorch.so`` the extension itself loaded, through ctypes.

The option is read when a method is loaded (each delegate's init), and each delegate remembers whether it used
the cache. So :func:`xnnpack_weight_cache` sets it for the loads in its block and puts the process's setting back
afterwards: a program loaded with ExecuTorch's own API keeps ExecuTorch's default.

The cache names a packing by its constant's name (a hash of the bytes) alone. A constant packed for two kinds of
kernel (a matrix read both as ``linear``'s weight and as ``matmul``'s right operand) is packed twice under one
name, and 1.5.1's cache then frees a packing that another loaded program still reads when one of the two is
destroyed. audiodeploy's lowering reads each constant one way (:mod:`~audiodeploy.lowering.passes.\
constant_matmul_as_linear`); a program from elsewhere that does not is loaded again without the cache
(:func:`load_with_weight_cache` reads the runtime's log of the load).

A program that computes in fp16 or bf16 is loaded without the cache. XNNPACK runs the operators that have no
16-bit kernel on the CPU in fp32, and registers the constants it converted for them with the cache
(``xnn_subgraph_alias_fp32_fallback_data``). Loaded through ExecuTorch 1.5.1's Python extension with the cache
on, that killed the process (SIGSEGV in ``xnn_weights_cache_alias_data``, every time: wav2vec2's tiny and base fp16
programs on an Intel Xeon with AVX512-FP16, whose fp16 kernels make XNNPACK convert only some operators); the
native runner loads the same programs with the cache. :func:`weight_cache_suits` tells such programs by their
fp16 or bf16 tensors, which audiodeploy's fp16 programs have at their float32 inputs' casts.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from audiodeploy.runtime.inspection import ProgramFormatError, holds_16_bit_floats
from audiodeploy.runtime.runtime_log import native_runtime_log

__all__ = ["load_with_weight_cache", "weight_cache_setting", "weight_cache_suits", "xnnpack_weight_cache"]

logger = logging.getLogger("audiodeploy.runtime")

_BACKEND = b"XnnpackBackend"
_OPTION = b"weight_cache_enabled"
_SET_OPTION = "_ZN10executorch7runtime10set_optionEPKcNS0_4SpanINS0_13BackendOptionEEE"
_GET_OPTION = "_ZN10executorch7runtime10get_optionEPKcNS0_4SpanINS0_13BackendOptionEEE"
_HOLDS_BOOL = 0
"""The index of ``bool`` among the alternatives of the option's value."""

_PACKED_TWO_WAYS = "seed mismatch"
"""What XNNPACK's weight cache logs (``XNNWeightsCache.cpp``, at Info) when a constant it packed for one kernel is
packed again for another under the same name."""


class _BackendOption(ctypes.Structure):
    """``executorch::runtime::BackendOption`` (``runtime/backend/options.h``): a 64-byte key, then its value, a
    ``std::variant<bool, int, std::array<char, 256>>``: 256 bytes of storage aligned as an ``int``, then the index
    of the alternative it holds in one byte (324 bytes in all)."""

    _fields_ = [("key", ctypes.c_char * 64), ("storage", ctypes.c_uint32 * 64), ("index", ctypes.c_uint8)]


_OptionFunction = Callable[[bytes, Any, int], int]
"""`set_option` or `get_option`: backend name, a pointer to the options (`ctypes.byref`), their count -> Error."""

_lock = threading.Lock()


@functools.cache
def _option_functions() -> tuple[_OptionFunction, _OptionFunction] | str:
    """``set_option`` and ``get_option`` of the runtime the extension loaded, or why they cannot be reached."""
    import executorch.extension.pybindings._C  # noqa: F401 (loads the libexecutorch.so the lookup below finds)

    try:
        library = ctypes.CDLL("libexecutorch.so", mode=os.RTLD_NOLOAD)
        functions = (library[_SET_OPTION], library[_GET_OPTION])
    except (OSError, AttributeError) as error:
        return f"this ExecuTorch runtime has no backend options to set ({error})"
    for function in functions:
        # `Span<BackendOption>` by value is a pointer and a size: two integer arguments (x86-64 and arm64 ABIs).
        function.argtypes = [ctypes.c_char_p, ctypes.POINTER(_BackendOption), ctypes.c_size_t]
        function.restype = ctypes.c_int32
    return functions


def weight_cache_setting() -> bool | None:
    """Whether XNNPACK's weight cache is on for the next load in this process; ``None`` where it cannot be read."""
    functions = _option_functions()
    if isinstance(functions, str):
        return None
    return _get(functions[1])


def _get(get_option: _OptionFunction) -> bool | None:
    option = _BackendOption(key=_OPTION)
    if get_option(_BACKEND, ctypes.byref(option), 1) != 0 or option.index != _HOLDS_BOOL:
        return None
    return bool(option.storage[0] & 0xFF)


def _set(set_option: _OptionFunction, enabled: bool) -> bool:
    option = _BackendOption(key=_OPTION, index=_HOLDS_BOOL)
    option.storage[0] = int(enabled)
    return set_option(_BACKEND, ctypes.byref(option), 1) == 0


@contextlib.contextmanager
def xnnpack_weight_cache(enabled: bool = True) -> Iterator[bool]:
    """XNNPACK's weight cache on (``enabled``) for the programs loaded in the block; whether it is on.

    It stays off (and the block is told so) where the runtime has no such option. The process's setting is put
    back after the block; loads in other threads wait for it.
    """
    functions = _option_functions()
    if isinstance(functions, str):
        logger.debug("XNNPACK's weight cache stays off: %s", functions)
        yield False
        return
    set_option, get_option = functions
    with _lock:
        before = _get(get_option)
        if before is None or not _set(set_option, enabled):
            logger.debug("XNNPACK's weight cache stays off: the runtime did not take the option")
            yield False
            return
        try:
            yield enabled
        finally:
            _set(set_option, before)


def weight_cache_suits(buffer: bytes) -> bool:
    """Whether the program in ``buffer`` is loaded with XNNPACK's weight cache: not where it computes in fp16 or
    bf16 (the module's docstring says why), nor where its bytes cannot be read (ExecuTorch's own checks judge them)."""
    try:
        return not holds_16_bit_floats(buffer)
    except ProgramFormatError:
        return False


def load_with_weight_cache(load: Callable[[], str], unload: Callable[[], None], buffer: bytes) -> bool:
    """``load`` the program in ``buffer`` (``load`` returns what the runtime logged) with XNNPACK's weight cache on
    where it :func:`suits <weight_cache_suits>` the program; whether it is on.

    A program whose load packed a constant for two kinds of kernel under one name is unloaded (``unload`` drops
    every native object it made) and loaded again without the cache.
    """
    with xnnpack_weight_cache(weight_cache_suits(buffer)) as cached:
        try:
            log = load()
        except BaseException:
            with native_runtime_log():  # the delegates it did load log what a load left unfinished
                unload()
            raise
    if cached and _PACKED_TWO_WAYS in log:
        with native_runtime_log():  # destroying its delegates logs the packings the cache no longer has
            unload()
        load()
        return False
    return cached
