"""Memory stays flat: peak RSS does not grow with the number of sequences recorded, and
--memory bounds it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import R, build, save
from tracer._tf import tf, v1

STEPS, FEATURES, UNITS = 20, 8, 64
WIDE = 4096  # features per step in the input file; the model reads the first FEATURES of them


def peak_rss_mb(model: str, x, out, *flags: str) -> float:
    """The peak RSS of `gatetrace record` in a fresh process (VmHWM: ru_maxrss would carry pytest's own peak)."""
    flags = flags or ("--batch-size", "100")
    code = (
        "import sys; from tracer.cli import main; "
        f"code = main(['record', {model!r}, '--feed', 'x={x}', '--out', {str(out)!r}, '--quiet', *{list(flags)!r}]); "
        "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]); sys.exit(code)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1]) / 1024


@pytest.mark.e2e
def test_peak_memory_does_not_grow_with_the_number_of_sequences(tmp_path):
    """Recording 2,000 sequences instead of 200 reads 590 MB more input (the model reads 8 of
    each step's 4,096 features) and writes about 92 MB more values. Peak RSS may grow by 40 MB
    at most: reading the input whole, or keeping the batches written, breaks that margin."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(UNITS), tf.unstack(x[:, :, :FEATURES], axis=1), dtype=tf.float32)
        return [outputs[-1]]

    model = save(build(body, steps=STEPS, features=WIDE), "checkpoint", tmp_path)
    rss = {}
    for n in (200, 2000):
        x = tmp_path / f"x{n}.npy"
        rows = np.lib.format.open_memmap(x, mode="w+", dtype=np.float32, shape=(n, STEPS, WIDE))  # written without holding it
        for start in range(0, n, 100):
            rows[start : start + 100] = np.random.RandomState(start).randn(min(100, n - start), STEPS, WIDE)
        rows.flush()
        del rows
        rss[n] = peak_rss_mb(model, x, tmp_path / f"out{n}")
        x.unlink()
    assert rss[2000] - rss[200] < 40, rss


@pytest.mark.e2e
def test_the_memory_budget_bounds_the_peak_rss_of_the_process(tmp_path):
    """An LSTM(64) over 100 steps records about 256 KB per sequence. A batch of 1,200 takes
    the process more than 200 MB above a run of one sequence per batch; with --memory at
    that run's peak plus 200 MB, the batch size is lowered and the process stays within it."""
    steps, features, units = 100, 8, 64

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(units), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    model = save(build(body, steps=steps, features=features), "checkpoint", tmp_path)
    x = tmp_path / "x.npy"
    np.save(x, np.random.RandomState(0).randn(1200, steps, features).astype(np.float32))
    base = peak_rss_mb(model, x, tmp_path / "one", "--batch-size", "1", "--examples", "0:4")
    budget = round(base + 200)
    whole = peak_rss_mb(model, x, tmp_path / "whole", "--batch-size", "1200", "--memory", "64G")
    budgeted = peak_rss_mb(model, x, tmp_path / "budgeted", "--batch-size", "1200", "--memory", f"{budget}M")
    assert whole > budget, (base, whole)
    assert budgeted <= budget, (base, budgeted)
    import json

    manifest = json.loads((tmp_path / "budgeted" / "manifest.json").read_text())
    assert manifest["examples"] == 1200
