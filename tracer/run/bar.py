"""Progress on stderr: a tqdm bar on a terminal; elsewhere (a log file, a pipe, a batch job's
output) one plain line per tenth of the work, so that a log holds no carriage returns.

    with progress_bar(total, show, "recording, batches of 256") as bar:
        bar.update(n)
        bar.set_postfix_str("1,024 rows", refresh=False)
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar", "LineProgress"]


class LineProgress:
    """tqdm's `update`/`set_postfix_str`/`close` as lines: `gatetrace: <desc>: starting on
    1,000 sequences`, then `gatetrace: <desc>: 30% (300 of 1,000 sequences), <postfix>` each
    time another tenth is done (every 10 updates when the total is unknown)."""

    def __init__(self, total: int | None, desc: str, stream: Any = None):
        self.total, self.desc, self.stream = total, desc, stream or sys.stderr
        self.n, self.updates, self.postfix, self._tenths = 0, 0, "", 0
        on = f" on {total:,} sequence{'s' if total != 1 else ''}" if total else ""
        # before the first batch runs
        print(f"gatetrace: {desc}: starting{on}", file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        self.updates += 1
        tenths = self.n * 10 // self.total if self.total else self.updates // 10
        if tenths > self._tenths:
            self._tenths = tenths
            done = (
                f"{self.n * 100 // self.total}% ({self.n:,} of {self.total:,} sequences)"
                if self.total
                else f"{self.n:,} sequences"
            )
            print(
                f"gatetrace: {self.desc}: {done}{', ' + self.postfix if self.postfix else ''}",
                file=self.stream,
                flush=True,
            )

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        pass

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(total: int | None, show: bool, desc: str, stream: Any = None):
    """A tqdm bar counting sequences on a terminal, `LineProgress` on any other stream, or (not
    `show`) a silent stand-in."""
    stream = stream or sys.stderr
    if show and not getattr(stream, "isatty", lambda: False)():
        return LineProgress(total, desc, stream)
    from tqdm import tqdm

    return tqdm(
        total=total, unit="seq", file=stream, disable=not show, dynamic_ncols=True, desc=desc
    )
