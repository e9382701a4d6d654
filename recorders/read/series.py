"""Reading a training run's recordings as one: a folder of one recording per checkpoint or epoch.

    s = Series("run-series")                  # written by gatetrace record DIR --checkpoints ...
    s.key, s.values                           # 'checkpoint', [1000, 2000, 3000]
    s.complete                                # the values whose recording is complete
    f = s.gate_frame(values=[1000, 3000], gates=["f"], columns=["activation"])   # with a `checkpoint` column
    s.recording(3000)                         # one key's `recorders.Recording`

The layout (`series.json`, then `KEY=VALUE/` folders, each a recording) is `tracer.run.series`'
(a series logged while training, `tracer.run.training`, lists no values: its folders say them).
A selection of values reads only their folders. `series.json` may come from anyone: it is read
through `parse_json`, and its key and values (integers) are checked before they name a folder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from recorders.errors import RecordingError, SelectionError
from recorders.read.reader import Recording
from recorders.write.schema import parse_json

__all__ = ["Series", "SERIES_FILE", "KEYS"]

SERIES_FILE = "series.json"
# a checkpoint's global step; an epoch; a step logged by the hook; a batch logged by the callback
KEYS = ("checkpoint", "epoch", "global_step", "batch")
_MAX_VALUE = 2**53


def _count(v: Any) -> bool:
    """Whether `v` is a whole number a series' key may take."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _MAX_VALUE


class Series:
    """The recordings of a series folder (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        shown = f"{self.path}/{SERIES_FILE}"
        try:
            data = (self.path / SERIES_FILE).read_bytes()[: 1 << 20]
        except OSError:
            raise RecordingError(
                f"{self.path} is not a series of recordings: it has no {SERIES_FILE} (gatetrace record DIR "
                "--checkpoints ... writes one)"
            ) from None
        found = parse_json(data, shown)
        key = found.get("key") if isinstance(found, dict) else None
        values = found.get("values") if isinstance(found, dict) else None
        if key in KEYS and values is None:  # logged while training: the folders say which
            values = self._logged(key)
        if (
            key not in KEYS
            or not isinstance(values, list)
            or not all(_count(v) for v in values)
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
                isinstance(b, str) and b.isdigit() and len(b) < 16 and _count(e)
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
        for entry in self.path.iterdir():
            name, _, value = entry.name.partition("=")
            if name == key and value.isdigit() and len(value) < 16 and entry.is_dir():
                found.append(int(value))
        return found

    def __repr__(self) -> str:
        return (
            f"Series({str(self.path)!r}, {self.key} {self.values}, {len(self.complete)} complete)"
        )

    def _folder(self, value: int) -> Path:
        return self.path / f"{self.key}={value}"

    @property
    def complete(self) -> list[int]:
        """The values whose recording is complete (its manifest is there)."""
        return [v for v in self.values if (self._folder(v) / "manifest.json").is_file()]

    def recording(self, value: int) -> Recording:
        """The recording of one value of the key."""
        self._check(value)
        return Recording(self._folder(value))

    def _check(self, value: int) -> None:
        """Say in one line why `value` has no recording to open, if it has none."""
        if value not in self.values:
            raise SelectionError(
                f"no {self.key} {value} in {self.path}; it holds {', '.join(map(str, self.values))}"
            )
        if not self._folder(value).is_dir():
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
