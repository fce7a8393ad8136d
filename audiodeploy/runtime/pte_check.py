"""What a .pte's bytes must be before ExecuTorch's runtime is given them, checked in Python.

ExecuTorch 1.5.1 cannot be trusted with arbitrary bytes in-process: its log lines go through pybind11's
``std::cerr`` redirection to ``sys.stderr``, and a log line that quotes non-UTF-8 bytes of the file (the
file identifier of a ``.wav``, say) aborts the interpreter with an uncaught ``UnicodeDecodeError``. So the
layout is checked here first, without importing torch or ExecuTorch:

- the size (at least a flatbuffer root offset and a file identifier);
- the file identifier ``ET12`` at bytes 4..8, and otherwise what the file is instead (an audio file, a zip, a
  ``.ptd``, a Git LFS pointer, ...);
- the extended header ``eh00`` at byte 8 (``executorch/exir/_serialize/_program.py``: uint32 header length,
  uint64 program size, uint64 segment base offset, uint64 segment data size, little endian) against the
  file length;
- the flatbuffer's root offset, and the ``Program`` table's segments, named data, constant segment and
  delegate references (``schema/program.fbs``), read with bounds checks, against the segment data.

What these checks cannot see (a flipped byte inside a delegate's payload) is ExecuTorch's and the child
process probe's business: see :mod:`audiodeploy.runtime.program`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from audiodeploy.errors import AudiodeployError

FILE_IDENTIFIER = b"ET12"
EXTENDED_HEADER_MAGIC = b"eh00"
_EXTENDED_HEADER_MIN_LENGTH = 24
"""magic, header length, program size, segment base offset (``_ExtendedHeader.MINIMUM_LENGTH``)."""
_EXTENDED_HEADER_FULL_LENGTH = 32
"""... and the segment data size (``_ExtendedHeader.EXPECTED_LENGTH``)."""
_DATA_FILE_IDENTIFIER = b"FT01"
_DATA_HEADER_MAGIC = b"FH01"
_DATA_HEADER_LENGTH = 40

GIVE_PTE = "give the .pte written by `audiodeploy export`"
EXPORT_AGAIN = "export it again (`audiodeploy export`)"

# Field numbers in schema/program.fbs.
_PROGRAM_EXECUTION_PLAN, _PROGRAM_BACKEND_DELEGATE_DATA, _PROGRAM_SEGMENTS = 1, 3, 4
_PROGRAM_CONSTANT_SEGMENT, _PROGRAM_MUTABLE_DATA_SEGMENTS, _PROGRAM_NAMED_DATA = 5, 6, 7
_PLAN_NAME, _PLAN_DELEGATES = 0, 7
_DELEGATE_PROCESSED = 1
_DATA_REFERENCE_LOCATION, _DATA_REFERENCE_INDEX = 0, 1
_SEGMENT_OFFSET, _SEGMENT_SIZE = 0, 1
_NAMED_DATA_SEGMENT_INDEX = 1
_SUBSEGMENT_SEGMENT_INDEX = 0
_LOCATION_INLINE, _LOCATION_SEGMENT = 0, 1


class ProgramLoadError(AudiodeployError, ValueError):
    """The bytes are not an ExecuTorch program this runtime can load; the message (one line) says why and what to do."""


@dataclass(frozen=True)
class ProgramLayout:
    """Where the parts of a checked .pte are."""

    file_bytes: int
    program_bytes: int
    """The flatbuffer, extended header included."""
    segment_base_offset: int
    """0 when the program has no segments."""
    segments: tuple[tuple[int, int], ...]
    """(offset from the segment base, size) of each segment."""
    method_names: tuple[str, ...]


def check_program_bytes(buffer: bytes, origin: str) -> ProgramLayout:
    """Raise :class:`ProgramLoadError` unless ``buffer`` is laid out as an ExecuTorch 1.5.1 program."""
    size = len(buffer)
    if size == 0:
        raise ProgramLoadError(f"{origin} is empty, not an ExecuTorch program; {GIVE_PTE}")
    if size < 8 or buffer[4:8] != FILE_IDENTIFIER:
        raise ProgramLoadError(_not_a_program(buffer, origin))
    program_size, base, data_size = _extended_header(buffer, origin)
    if base:
        # The segments follow the flatbuffer; the header says how many bytes they take.
        expected = base + data_size if data_size else None
        if base > size or (expected is not None and expected > size):
            raise ProgramLoadError(
                f"{origin} is truncated: its header says {expected or base} bytes, the file has {size}; {EXPORT_AGAIN}"
            )
        if expected is not None and size > expected:
            raise ProgramLoadError(
                f"{origin} has {size} bytes where its header says {expected}: bytes were appended or the header "
                f"is damaged; {EXPORT_AGAIN}"
            )
    try:
        segments, names = _read_program_table(buffer, program_size, base, size - base if base else 0)
    except _Damaged as damage:
        raise ProgramLoadError(f"{origin} is a damaged ExecuTorch program ({damage}); {EXPORT_AGAIN}") from None
    return ProgramLayout(size, program_size, base, segments, names)


def check_data_bytes(buffer: bytes, origin: str) -> None:
    """Raise :class:`ProgramLoadError` unless ``buffer`` is laid out as an ExecuTorch .ptd (flat tensor) file."""
    size = len(buffer)
    if size == 0:
        raise ProgramLoadError(
            f"{origin} is empty, not an ExecuTorch .ptd data file; give the .ptd written with the .pte"
        )
    if size < 8 or buffer[4:8] != _DATA_FILE_IDENTIFIER:
        what = _foreign_format(buffer)
        if size >= 8 and buffer[4:8] == FILE_IDENTIFIER:
            what = "an ExecuTorch program (.pte), not its data"
        raise ProgramLoadError(
            f"{origin} is not an ExecuTorch .ptd data file{f': it is {what}' if what else ''}; "
            "give the .ptd written with the .pte"
        )
    if size < 8 + _DATA_HEADER_LENGTH or buffer[8:12] != _DATA_HEADER_MAGIC:
        raise ProgramLoadError(f"{origin} is a damaged .ptd data file (no FH01 header); export the program again")
    length, fb_offset, fb_size, base, data_size = struct.unpack_from("<IQQQQ", buffer, 12)
    ends = {"the header": 8 + length, "the flatbuffer": fb_offset + fb_size, "the segments": base + data_size}
    for part, end in ends.items():
        if end > size:
            raise ProgramLoadError(
                f"{origin} is truncated: {part} ends at byte {end}, the file has {size}; export the program again"
            )


def _extended_header(buffer: bytes, origin: str) -> tuple[int, int, int]:
    """(program size, segment base offset, segment data size); a program without the header has no segments."""
    size = len(buffer)
    if buffer[8:12] != EXTENDED_HEADER_MAGIC:
        return size, 0, 0
    if size < 8 + _EXTENDED_HEADER_MIN_LENGTH:
        raise ProgramLoadError(f"{origin} is truncated inside its header ({size} bytes); {EXPORT_AGAIN}")
    length, program_size, base = struct.unpack_from("<IQQ", buffer, 12)
    data_size = struct.unpack_from("<Q", buffer, 32)[0] if length >= _EXTENDED_HEADER_FULL_LENGTH and size >= 40 else 0
    if not _EXTENDED_HEADER_MIN_LENGTH <= length <= 256:
        raise ProgramLoadError(f"{origin} has a damaged header (header length {length}); {EXPORT_AGAIN}")
    if program_size > size:
        raise ProgramLoadError(
            f"{origin} is truncated: its header says the program is {program_size} bytes, the file has {size}; "
            f"{EXPORT_AGAIN}"
        )
    if program_size < 8 + length or (base and base < program_size):
        raise ProgramLoadError(
            f"{origin} has a damaged header (program size {program_size}, segments at {base}); {EXPORT_AGAIN}"
        )
    return program_size, base, data_size


class _Damaged(Exception):
    """The flatbuffer points outside itself or holds a value that cannot be; the message says where."""


class _Flatbuffer:
    """Just enough of a flatbuffer reader for the checks: every read is bounds-checked against ``end``."""

    def __init__(self, data: bytes, end: int) -> None:
        self.data = data
        self.end = end

    def unpack(self, fmt: str, position: int, what: str) -> int:
        if position < 0 or position + struct.calcsize(fmt) > self.end:
            raise _Damaged(f"{what} at byte {position} is outside the {self.end}-byte flatbuffer")
        return struct.unpack_from(fmt, self.data, position)[0]

    def table(self, position: int, what: str) -> _Table:
        vtable = position - self.unpack("<i", position, what)
        vtable_size = self.unpack("<H", vtable, f"{what}'s vtable")
        if vtable_size < 4 or vtable_size % 2:
            raise _Damaged(f"{what}'s vtable has size {vtable_size}")
        self.unpack("<H", vtable + vtable_size - 2, f"{what}'s vtable")
        return _Table(self, position, vtable, vtable_size, what)


class _Table:
    def __init__(self, buffer: _Flatbuffer, position: int, vtable: int, vtable_size: int, what: str) -> None:
        self.buffer, self.position, self.what = buffer, position, what
        self.vtable, self.vtable_size = vtable, vtable_size

    def _field(self, index: int) -> int | None:
        slot = 4 + 2 * index
        if slot >= self.vtable_size:
            return None
        offset = self.buffer.unpack("<H", self.vtable + slot, self.what)
        return self.position + offset if offset else None

    def scalar(self, index: int, fmt: str, name: str) -> int:
        position = self._field(index)
        return 0 if position is None else self.buffer.unpack(fmt, position, f"{self.what}.{name}")

    def _target(self, index: int, name: str) -> int | None:
        position = self._field(index)
        if position is None:
            return None
        return position + self.buffer.unpack("<I", position, f"{self.what}.{name}")

    def table(self, index: int, name: str) -> _Table | None:
        target = self._target(index, name)
        return None if target is None else self.buffer.table(target, f"{self.what}.{name}")

    def string(self, index: int, name: str) -> bytes | None:
        target = self._target(index, name)
        if target is None:
            return None
        length = self.buffer.unpack("<I", target, f"{self.what}.{name}")
        self.buffer.unpack("<B", target + 4 + length, f"{self.what}.{name}'s end")
        return bytes(self.buffer.data[target + 4 : target + 4 + length])

    def tables(self, index: int, name: str) -> list[_Table]:
        target = self._target(index, name)
        if target is None:
            return []
        count = self.buffer.unpack("<I", target, f"{self.what}.{name}")
        what = f"{self.what}.{name}"
        if target + 4 + 4 * count > self.buffer.end:
            raise _Damaged(f"{what} claims {count} entries, more than the flatbuffer holds")
        entries = []
        for i in range(count):
            slot = target + 4 + 4 * i
            entries.append(self.buffer.table(slot + self.buffer.unpack("<I", slot, what), f"{what}[{i}]"))
        return entries

    def length(self, index: int, name: str) -> int:
        target = self._target(index, name)
        return 0 if target is None else self.buffer.unpack("<I", target, f"{self.what}.{name}")


def _read_program_table(
    buffer: bytes, program_size: int, base: int, segment_bytes: int
) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    flatbuffer = _Flatbuffer(buffer, program_size)
    root = flatbuffer.unpack("<I", 0, "the root offset")
    if not 8 <= root <= program_size - 4:
        raise _Damaged(f"the root table offset {root} is outside the {program_size}-byte flatbuffer")
    program = flatbuffer.table(root, "Program")
    segments = []
    for i, segment in enumerate(program.tables(_PROGRAM_SEGMENTS, "segments")):
        offset = segment.scalar(_SEGMENT_OFFSET, "<Q", "offset")
        size = segment.scalar(_SEGMENT_SIZE, "<Q", "size")
        if offset + size > segment_bytes:
            if not base:
                raise _Damaged(f"segment {i} has no segment data to point into (no extended header)")
            raise _Damaged(
                f"segment {i} spans bytes {base + offset}..{base + offset + size}, the file has {base + segment_bytes}"
            )
        segments.append((offset, size))
    count = len(segments)

    def check_index(index: int, what: str) -> None:
        if index >= count:
            raise _Damaged(f"{what} refers to segment {index}, the program has {count}")

    for i, named in enumerate(program.tables(_PROGRAM_NAMED_DATA, "named_data")):
        check_index(named.scalar(_NAMED_DATA_SEGMENT_INDEX, "<I", "segment_index"), f"named data {i}")
    constant = program.table(_PROGRAM_CONSTANT_SEGMENT, "constant_segment")
    if constant is not None and count:
        check_index(constant.scalar(_SUBSEGMENT_SEGMENT_INDEX, "<I", "segment_index"), "the constant segment")
    for i, mutable in enumerate(program.tables(_PROGRAM_MUTABLE_DATA_SEGMENTS, "mutable_data_segments")):
        check_index(mutable.scalar(_SUBSEGMENT_SEGMENT_INDEX, "<I", "segment_index"), f"mutable data {i}")
    inline = program.length(_PROGRAM_BACKEND_DELEGATE_DATA, "backend_delegate_data")
    names = []
    plans = program.tables(_PROGRAM_EXECUTION_PLAN, "execution_plan")
    if not plans:
        raise _Damaged("it has no methods")
    for plan in plans:
        raw = plan.string(_PLAN_NAME, "name") or b""
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Damaged(f"a method name is not text ({raw[:32]!r})") from None
        names.append(name)
        for j, delegate in enumerate(plan.tables(_PLAN_DELEGATES, "delegates")):
            processed = delegate.table(_DELEGATE_PROCESSED, "processed")
            if processed is None:
                raise _Damaged(f"delegate {j} of method {name!r} has no data")
            location = processed.scalar(_DATA_REFERENCE_LOCATION, "<B", "location")
            index = processed.scalar(_DATA_REFERENCE_INDEX, "<I", "index")
            if location == _LOCATION_SEGMENT:
                check_index(index, f"delegate {j} of method {name!r}")
            elif location == _LOCATION_INLINE:
                if index >= inline:
                    raise _Damaged(f"delegate {j} of method {name!r} refers to inline data {index}, there are {inline}")
            else:
                raise _Damaged(f"delegate {j} of method {name!r} has data location {location}")
    return tuple(segments), tuple(names)


def _not_a_program(buffer: bytes, origin: str) -> str:
    identifier = buffer[4:8]
    if len(buffer) >= 8 and identifier[:2] == b"ET" and identifier[2:].isdigit():
        return (
            f"{origin} is an ExecuTorch program of another format ({identifier.decode()}; this runtime reads "
            f"{FILE_IDENTIFIER.decode()}): export it again with the installed executorch"
        )
    if identifier == _DATA_FILE_IDENTIFIER:
        return (
            f"{origin} is an ExecuTorch .ptd data file (a program's constants), not the program; "
            "give the .pte, with this file as its data"
        )
    what = _foreign_format(buffer)
    if what is None:
        return (
            f"{origin} is not an ExecuTorch program (no {FILE_IDENTIFIER.decode()} identifier at bytes 4-7, "
            f"{len(buffer)} bytes); {GIVE_PTE}"
        )
    if what.startswith("a Git LFS pointer"):
        return f"{origin} is {what}, not the program itself; fetch it (`git lfs pull`) or {GIVE_PTE}"
    return f"{origin} is not an ExecuTorch program: it starts like {what}; {GIVE_PTE}"


def _foreign_format(buffer: bytes) -> str | None:
    """What ``buffer`` looks like, from its first bytes, for the few formats people give by mistake."""
    head = bytes(buffer[:64])
    if head[:4] == b"RIFF":
        return "a RIFF/WAVE audio file" if head[8:12] == b"WAVE" else "a RIFF file"
    magics = {
        b"fLaC": "a FLAC audio file",
        b"OggS": "an Ogg audio file",
        b"ID3": "an MP3 audio file",
        b"PK\x03\x04": "a zip archive (PyTorch .pt/.pth checkpoints are zip archives)",
        b"PK\x05\x06": "an empty zip archive",
        b"\x93NUMPY": "a NumPy .npy array",
        b"\x1f\x8b": "a gzip archive",
        b"\x7fELF": "an executable (ELF)",
        b"\x89PNG": "a PNG image",
        b"version https://git-lfs": "a Git LFS pointer",
    }
    for magic, what in magics.items():
        if head.startswith(magic):
            return what
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return "an MP3 audio file"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a Python pickle (an old PyTorch checkpoint is one)"
    if len(buffer) >= 8 and buffer[4:8] == b"TFL3":
        return "a TensorFlow Lite model"
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return "JSON text (a program's sidecar is the .json beside its .pte)"
    if text[:1] == b"<":
        return "an HTML or XML page (a failed download?)"
    if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head):
        return "a text file"
    return None
