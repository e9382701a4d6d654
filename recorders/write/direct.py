"""Writing a new local file past the page cache (`O_DIRECT`), through a buffer each thread reuses.

A recording writes hundreds of megabytes a batch that it will not read again soon. Through the
page cache, each byte is copied into pages the kernel must first find: on a virtual machine
whose freed memory goes back to the host, a fresh page is the host's to provide again, and
writing 2 GB of new files took 4.7 to 5.0 s of system time where rewriting pages already
held took 0.39 s (measured, 2-core VM). Written with `O_DIRECT`, the bytes go from one buffer
per writer thread, already in memory, to the device: 2 GB in 1.05 s of wall time and 0.02 s
of CPU on the same machine, the CPU left to TensorFlow.

`DirectFile` gathers what is written into its thread's buffer (aligned, 2 MB) and writes it
whole; `close` writes the rest padded to the block size and cuts the file to its length.
`open_direct` opens a new file so, or returns None where the file system refuses `O_DIRECT`
(tmpfs on older kernels, some network and FUSE file systems): the caller writes through the
page cache then.
A file system that takes the flag at open but refuses a write gets the rest of the file
through the page cache (the flag is cleared on the open file).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from typing import Any

import numpy as np

__all__ = ["DirectFile", "open_direct", "BUFFER", "WRITE_THREADS"]

BUFFER = 2 << 20  # bytes gathered before a write: a multiple of any block size

# Worker threads encoding a batch's files. Three on two cores: while one waits (for the page
# cache, for the GIL) another encodes; whole processes of the benchmark were faster in each of
# 3 interleaved rounds with 3 than with 2 (0.95 s against 1.06 s a batch, medians, AMD EPYC).
# Each holds one row group's columns at a time, within `tracer.run.budget.RESERVE`.
WRITE_THREADS = 3
# writes, their offsets and their buffers are aligned to this: Linux asks for the device's
# logical block size (512 or 4096; a device that asks more refuses, and gets the page cache)
_BLOCK = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_buffers = threading.local()


def open_direct(folder: Any, rel: str) -> DirectFile | None:
    """A new file `rel` of `folder` (a `recorders.write.folder.Folder`) opened for writing past
    the page cache, or None where this system or file system does not do that."""
    if not _O_DIRECT:
        return None
    try:
        fd = folder.open_fd(
            rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_DIRECT, create_parents=True
        )
    except OSError as err:
        if err.errno == errno.EINVAL:
            return None
        raise
    return DirectFile(fd)


class DirectFile:
    """A file written through an aligned buffer of its thread's, `O_DIRECT` (see the module docstring)."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = _take_buffer()
        self._used = 0  # bytes in the buffer
        self._written = 0  # bytes in the file
        self._direct = True

    def fileno(self) -> int:
        return self._fd

    def write(self, data: Any) -> int:
        source = np.frombuffer(data, np.uint8) if memoryview(data).nbytes else np.empty(0, np.uint8)
        done = 0
        while done < len(source):
            n = min(len(source) - done, BUFFER - self._used)
            # numpy copies without holding the GIL
            self._buffer[self._used : self._used + n] = source[done : done + n]
            self._used += n
            done += n
            if self._used == BUFFER:
                self._flush(BUFFER)
        return done

    def _flush(self, n: int) -> None:
        """Write the first `n` bytes of the buffer (a multiple of the block size)."""
        view = self._buffer.data[:n]
        while view.nbytes:
            try:
                written = os.write(self._fd, view)
            except OSError as err:
                if err.errno != errno.EINVAL or not self._direct:
                    raise
                import fcntl  # POSIX, as O_DIRECT is: not imported where neither exists

                # the file system took O_DIRECT at open and refuses it now: the page cache then
                fcntl.fcntl(
                    self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~_O_DIRECT
                )
                self._direct = False
                continue
            view = view[written:]
            self._written += written
        self._used = 0

    def close(self) -> None:
        """Write what the buffer holds and close the file (idempotent)."""
        if self._fd < 0:
            return
        try:
            size = self._written + self._used
            padded = -(-self._used // _BLOCK) * _BLOCK
            self._buffer[self._used : padded] = 0
            self._flush(padded)
            if self._written != size:
                os.ftruncate(self._fd, size)
        finally:
            os.close(self._fd)
            self._fd = -1
            _buffers.spare = self._buffer

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take_buffer() -> np.ndarray:
    """This thread's spare buffer, or a new one: page-aligned (an anonymous map), touched once
    and reused by each file the thread writes after (a file open holds its own)."""
    found = getattr(_buffers, "spare", None)
    _buffers.spare = None
    if found is None:
        found = np.frombuffer(mmap.mmap(-1, BUFFER), np.uint8)
        found[:] = 0
    return found
