"""What each Parquet encoding and codec costs and saves, on one batch of real recorded values.

    python bench/encodings.py [--sequences 256] [--rounds 5]

Records the model of bench/record.py (2 x BasicLSTMCell(256), T=50) on `--sequences` random
sequences, then rewrites the first batch's gate and state files, in memory (`/dev/shm` is not
needed: a pyarrow buffer), with each choice alone:

- the float columns (preactivation, activation, state values): plain with no codec (what
  the writer does by default, `--compression fast`), and byte-stream-split with no codec,
  lz4, zstd at levels 1, 2, 3, 5, and brotli 5: bytes per value and ns per value;
- the key columns (example, step, unit), plain with lz4 and statistics on example and step
  (what the writer does), the same with statistics on unit too, delta binary packed,
  dictionary: bytes per row and ns per row;
- every column optional (nullable, with definition levels) against required.

Medians of `--rounds`. Prints the tables with the processor and writes
bench/encodings_results.json. Bytes per stored value of a recording are the floats' bytes plus
the keys' bytes spread over the values of a row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
import pyarrow.parquet as pq
from read import make_recording
from record import _cpu_name

HERE = Path(__file__).resolve().parent
KEYS = ("example", "step", "unit")
FLOATS = ("preactivation", "activation", "value")


def encode(
    tables: list[pa.Table], rounds: int, required: bool = True, **options
) -> tuple[float, int]:
    """Median seconds to write every table into memory with `options`, and the bytes written."""
    if required:
        tables = [
            pa.Table.from_arrays(
                t.columns, schema=pa.schema([f.with_nullable(False) for f in t.schema])
            )
            for t in tables
        ]
    times, size = [], 0
    for _ in range(rounds):
        size, start = 0, time.perf_counter()
        for t in tables:
            sink = pa.BufferOutputStream()
            pq.write_table(t, sink, row_group_size=1 << 20, **_for(t, options))
            size += sink.getvalue().size
        times.append(time.perf_counter() - start)
    return statistics.median(times), size


def _for(table: pa.Table, options: dict) -> dict:
    """`options` with the per-column settings cut down to the columns `table` has."""
    names = set(table.column_names)
    out = dict(options)
    if "column_encoding" in out:
        out["column_encoding"] = {c: e for c, e in out["column_encoding"].items() if c in names}
    if isinstance(out.get("write_statistics"), list):
        out["write_statistics"] = [c for c in out["write_statistics"] if c in names]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out, _ = make_recording(Path(tmp), args.sequences)
        files = sorted(out.glob("*/*/*/part-0000000000.parquet"))
        tables = [pq.read_table(f, partitioning=None) for f in files]
    floats = [t.select([c for c in t.column_names if c in FLOATS]) for t in tables]
    keys = [t.select(list(KEYS)) for t in tables]
    values = sum(t.num_rows * t.num_columns for t in floats)
    rows = sum(t.num_rows for t in keys)
    split = {"use_dictionary": False, "write_statistics": False}
    codecs = {
        "none": {"compression": "none"},
        "lz4": {"compression": "lz4"},
        **{
            f"zstd{level}": {"compression": "zstd", "compression_level": level}
            for level in (1, 2, 3, 5)
        },
        "brotli5": {"compression": "brotli", "compression_level": 5},
    }
    results = {
        "processor": _cpu_name(),
        "cpus": os.cpu_count(),
        "float_values": values,
        "key_rows": rows,
        "floats": {},
        "keys": {},
        "nullability": {},
    }
    float_choices = {"plain+none (the writer's, fast)": {"compression": "none"}}
    for name, codec in codecs.items():
        float_choices[f"byte_stream_split+{name}"] = {
            **codec,
            "column_encoding": {c: "BYTE_STREAM_SPLIT" for c in FLOATS},
        }
    for name, choice in float_choices.items():
        seconds, size = encode(floats, args.rounds, **split, **choice)
        results["floats"][name] = {
            "bytes_per_value": round(size / values, 3),
            "ns_per_value": round(seconds / values * 1e9, 2),
        }
    stats = ["example", "step"]
    key_choices = {
        "plain+lz4 (the writer's)": {
            "compression": "lz4",
            "use_dictionary": False,
            "write_statistics": stats,
        },
        "plain+lz4, statistics on unit too": {
            "compression": "lz4",
            "use_dictionary": False,
            "write_statistics": list(KEYS),
        },
        "delta_binary_packed": {
            "compression": "none",
            "use_dictionary": False,
            "write_statistics": stats,
            "column_encoding": {k: "DELTA_BINARY_PACKED" for k in KEYS},
        },
        "dictionary": {"compression": "none", "use_dictionary": True, "write_statistics": stats},
    }
    for name, choice in key_choices.items():
        seconds, size = encode(keys, args.rounds, **choice)
        results["keys"][name] = {
            "bytes_per_row": round(size / rows, 4),
            "ns_per_row": round(seconds / rows * 1e9, 2),
        }
    whole = {
        "compression": "lz4",
        "use_dictionary": False,
        "write_statistics": list(KEYS),
        "column_encoding": {c: "BYTE_STREAM_SPLIT" for c in FLOATS},
    }
    for required in (False, True):
        seconds, size = encode(
            [t.select([c for c in t.column_names if c in KEYS + FLOATS]) for t in tables],
            args.rounds,
            required,
            **whole,
        )
        results["nullability"]["required" if required else "optional"] = {
            "seconds": round(seconds, 3),
            "bytes": size,
        }
    (HERE / "encodings_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
