"""Reading a training run's recordings as one: a folder of one recording per checkpoint or epoch.

    s = Series("run-series")                  # written by gatetrace record DIR --checkpoints ...
    s.key, s.values                           # 'checkpoint', [1000, 2000, 3000]
    s.complete                                # the values whose recording is complete
    f = s.gate_frame(values=[1000, 3000], gates=["f"], columns=["activation"])   # with a `checkpoint` column
    s.recording(3000)                         # one key's `recorders.Recording`

The layout (`series.json`, then `KEY=VALUE/` folders, each a recording) is `tracer.run.series`'
(a series logged while training, `tracer.run.training`, lists no values: its folders say them).
A selection of values reads only their folders. A series may come from anyone: `series.json` is
read only as a regular file of at most 1 MB inside the folder (never through a link, never a
FIFO or a device), through `parse_json`, and its key and values (integers) are checked before
they name a folder; a key's folder must be a folder inside the series (a link is refused).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from recorders.errors import RecordingError, SelectionError
from recorders.read.files import DAMAGED
from recorders.read.reader import Recording
from recorders.write.folder import Folder, NotRegularFile
from recorders.write.schema import parse_json
from recorders.write.series import KEYS, SERIES_FILE, is_key

__all__ = ["Series", "SERIES_FILE", "KEYS"]


class Series:
    """The recordings of a series folder (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        shown = f"{self.path}/{SERIES_FILE}"
        not_one = RecordingError(
            f"{self.path} is not a series of recordings: it has no {SERIES_FILE} (gatetrace record DIR "
            "--checkpoints ... writes one)"
        )
        try:
            self._root = Folder(self.path.resolve())
        except OSError:
            raise not_one from None
        weakref.finalize(self, self._root.close)
        try:
            data = self._root.read_bytes(SERIES_FILE, 1 << 20)
        except NotRegularFile:
            raise RecordingError(
                f"{shown} is {self._root.kind(SERIES_FILE)}: gatetrace reads only the regular files inside a series "
                "(it writes nothing else) and read nothing from it"
            ) from None
        except FileNotFoundError:
            raise not_one from None
        except OSError as err:
            raise RecordingError(
                f"{shown} cannot be read ({err.strerror or err}): {DAMAGED}"
            ) from None
        found = parse_json(data, shown)
        key = found.get("key") if isinstance(found, dict) else None
        values = found.get("values") if isinstance(found, dict) else None
        if key in KEYS and values is None:  # logged while training: the folders say which
            values = self._logged(key)
        if (
            key not in KEYS
            or not isinstance(values, list)
            or not all(is_key(v) for v in values)
            or len(set(values)) != len(values)
        ):
            raise RecordingError(
                f"{shown} is not a series gatetrace wrote: expected a key ({' or '.join(KEYS)}) and distinct "
                "non-negative integer values"
            )
        self.key: str = key
        self.values: list[int] = sorted(values)
        self.source = found.get("source")
        # logged by batch: the epoch of each batch (those the file names)
        epochs = found.get("epochs") if key == "batch" else None
        if epochs is not None and not (
            isinstance(epochs, dict)
            and all(
                isinstance(b, str) and b.isdigit() and len(b) < 16 and is_key(e)
                for b, e in epochs.items()
            )
        ):
            raise RecordingError(
                f"{shown}: its epochs are not a map of batch numbers to epochs, as gatetrace writes it"
            )
        self.epochs: dict[int, int] = {int(b): e for b, e in (epochs or {}).items()}

    def _logged(self, key: str) -> list[int]:
        """The values of the `KEY=VALUE` folders there (a series logged while training)."""
        found = []
        for name in self._root.entries():
            label, _, value = name.partition("=")
            if label == key and value.isdigit() and len(value) < 16:
                self._refuse_odd(name)
                found.append(int(value))
        return found

    def _refuse_odd(self, name: str) -> None:
        """RecordingError unless the entry `name` is a folder (not a link to one)."""
        kind = self._root.kind(name)
        if kind not in ("a folder", "missing"):
            raise RecordingError(
                f"{self.path}/{name} is {kind}: a series' recordings are folders inside it (gatetrace writes "
                "nothing else) and nothing was read from it; if you trust what it points to, copy the series with its "
                "links resolved (cp -rL) and open the copy"
            )

    def __repr__(self) -> str:
        return (
            f"Series({str(self.path)!r}, {self.key} {self.values}, {len(self.complete)} complete)"
        )

    @property
    def complete(self) -> list[int]:
        """The values whose recording is complete (its manifest is there)."""
        for v in self.values:
            self._refuse_odd(f"{self.key}={v}")
        return [v for v in self.values if "manifest.json" in self._root.entries(f"{self.key}={v}")]

    def recording(self, value: int) -> Recording:
        """The recording of one value of the key."""
        self._check(value)
        return Recording(self._root.path / f"{self.key}={value}")

    def _check(self, value: int) -> None:
        """Say in one line why `value` has no recording to open, if it has none."""
        if value not in self.values:
            raise SelectionError(
                f"no {self.key} {value} in {self.path}; it holds {', '.join(map(str, self.values))}"
            )
        self._refuse_odd(f"{self.key}={value}")
        if not self._root.is_dir(f"{self.key}={value}"):
            raise SelectionError(
                f"{self.key} {value} of {self.path} is not recorded yet: resume the series to record it"
            )

    def _chosen(self, values: Sequence[int] | None) -> list[int]:
        if values is None:
            return self.complete
        for v in values:
            self._check(v)
        return sorted(set(values))

    def gate_frame(self, values: Sequence[int] | None = None, **selection: Any) -> pd.DataFrame:
        """`Recording.gate_frame(**selection)` of each value (default: every complete one), one
        frame with the key (`checkpoint`, `epoch`, `global_step` or `batch`) as its first column
        (`keyed`)."""
        return self._frame("gate_frame", values, selection)

    def state_frame(self, values: Sequence[int] | None = None, **selection: Any) -> pd.DataFrame:
        """`Recording.state_frame(**selection)` of each value, as `gate_frame`."""
        return self._frame("state_frame", values, selection)

    def keyed(self, df: pd.DataFrame, value: int) -> pd.DataFrame:
        """`df` (a frame of the recording of `value`) with the key as its first column, and,
        logged by batch, the batch's `epoch` second (-1 where the series file does not say)."""
        df.insert(0, self.key, pd.Series(value, index=df.index, dtype="int64"))
        if self.key == "batch":
            df.insert(
                1, "epoch", pd.Series(self.epochs.get(value, -1), index=df.index, dtype="int64")
            )
        return df

    def _frame(self, method: str, values: Sequence[int] | None, selection: dict) -> pd.DataFrame:
        frames = []
        for v in self._chosen(values):
            frames.append(self.keyed(getattr(self.recording(v), method)(**selection), v))
        if not frames:
            raise SelectionError(f"{self.path} holds no complete recording yet")
        out = pd.concat(frames, ignore_index=True)
        for name in ("cell", "gate", "state"):
            if name in out:
                out[name] = out[name].astype("category")
        return out
