"""Memory stays flat: peak RSS does not grow with the number of sequences recorded."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import R, build, save
from tracer._tf import tf, v1

STEPS, FEATURES, UNITS = 20, 8, 64


def peak_rss_mb(model: str, x, out) -> float:
    """The peak RSS of `gatetrace record` in a fresh process (VmHWM: ru_maxrss would carry pytest's own peak)."""
    code = (
        "import sys; from tracer.cli import main; "
        f"code = main(['record', {model!r}, '--feed', 'x={x}', '--out', {str(out)!r}, '--quiet', '--batch-size', '100']); "
        "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]); sys.exit(code)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1]) / 1024


@pytest.mark.e2e
def test_peak_memory_does_not_grow_with_the_number_of_sequences(tmp_path):
    """10x the sequences would hold about 180 MB more if batches were kept; allow 40 MB of noise."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(UNITS), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    model = save(build(body, steps=STEPS, features=FEATURES), "checkpoint", tmp_path)
    rss = {}
    for n in (400, 4000):
        x = tmp_path / f"x{n}.npy"
        np.save(x, np.random.RandomState(0).randn(n, STEPS, FEATURES).astype(np.float32))
        rss[n] = peak_rss_mb(model, x, tmp_path / f"out{n}")
    per_sequence_mb = STEPS * UNITS * (4 * 2 + 2) * 4 / 2**20  # gate values, both columns, and c, h as float32
    assert 3600 * per_sequence_mb > 150
    assert rss[4000] - rss[400] < 40, rss
