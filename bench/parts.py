"""What recording the preactivations' parts costs, and how closely they add up.

    python bench/parts.py [--whole-rounds 3]

On the model of `bench/record.py` (2 x BasicLSTMCell(256), static_rnn, T=50, D=64, batch
256): whole `gatetrace record` processes at their default value columns and with
`--values preactivation,activation,contributions`, side by side in the same interleaved
rounds with a script running only the forward pass (`bench.record.whole_process`):
the marginal cost of a batch of each as a ratio to the forward pass, medians. Then, on one
recorded batch, how far input + recurrent + bias is from the recorded preactivation: the
largest absolute difference, its 99.9th percentile and median, beside the largest |preactivation|.
Prints the figures with the processor and writes bench/parts_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from record import BATCH, FEATURES, STEPS, _cpu_name, build_model, whole_process

import tracer
from recorders import Recording

HERE = Path(__file__).resolve().parent
PARTS_FLAGS = ["--values", "preactivation,activation,contributions"]


def closeness(model: str, root: Path) -> dict:
    """On one batch: |input + recurrent + bias - preactivation|, absolute and relative."""
    x = np.random.RandomState(0).randn(BATCH, STEPS, FEATURES).astype(np.float32)
    with tracer.load_model(model) as m:
        tracer.record(
            m,
            {"x": x},
            root / "closeness",
            values=["preactivation", "contributions"],
            memory=8 << 30,
        )
    df = Recording(root / "closeness").gate_frame(
        columns=["preactivation", "input", "recurrent", "bias"]
    )
    parts = df[["input", "recurrent", "bias"]].to_numpy(np.float64)
    pre = df["preactivation"].to_numpy(np.float64)
    diff = np.abs(parts.sum(axis=1) - pre)
    return {
        "rows": len(df),
        "max_abs_difference": float(diff.max()),
        "p99_9_abs_difference": float(np.quantile(diff, 0.999)),
        "median_abs_difference": float(np.median(diff)),
        "max_abs_preactivation": float(np.abs(pre).max()),
        "float32_epsilon": float(np.finfo(np.float32).eps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--whole-rounds",
        type=int,
        default=3,
        help="0: keep the whole-process figures of the last run",
    )
    args = parser.parse_args()
    last = HERE / "parts_results.json"
    kept = (
        json.loads(last.read_text()).get("whole_process")
        if last.is_file() and not args.whole_rounds
        else None
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session, _, output, model = build_model(root)
        session.close()
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "model": "2 x BasicLSTMCell(256), static_rnn, T=50, D=64, batch 256",
            "sum_vs_preactivation": closeness(model, root),
            "whole_process": kept
            or whole_process(
                model,
                output.name,
                root,
                args.whole_rounds,
                variants={"record_parts": PARTS_FLAGS},
                base_flags=("--batch-size", "256", "--memory", "8G"),
            ),
        }
    (HERE / "parts_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
