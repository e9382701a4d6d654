"""`Recording.check()` (`gatetrace inspect RUN --check`) against files rewritten to read well.

Each recording here is valid Parquet whose page checksums hold, edited as another tool would:
a footer's statistics or top values changed to plausible lies (the merged statistics file
made to agree with them), a part file rewritten without checksums, folders of no cell or
output the description lists. The oracle is the values as pandas reads them from the file
(the lies are made from them), or the description itself: check names the file in one line.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from recorders import Recording, RecordingError
from recorders.write import partstats
from recorders.write.tops import TOP_KEY, Tops
from recorders.write.tops import read as read_tops
from tests.test_hostile_order import record_small_lstm

LSTM = "rnn/basic_lstm_cell"
FOLDER = "gates/cell=" + LSTM.replace("/", "%2F")
ANY = (0, 2**62)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """Two part files a gate, each carrying statistics and top values, and a merged statistics file."""
    return record_small_lstm(tmp_path_factory.mktemp("rewritten") / "run", seed=7)


def copy(pristine: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recording, and the second part file of gate i."""
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    return run, sorted((run / FOLDER / "gate=i").glob("part-*.parquet"))[1]


def replace_footer(part: Path, key: bytes, new: bytes) -> None:
    """The footer value under `key` replaced in place by `new`, of the same length (the
    footer's offsets and the pages' checksums stay right)."""
    old = pq.ParquetFile(part).metadata.metadata[key]
    assert len(new) == len(old)
    data = part.read_bytes()
    assert data.count(old) == 1
    part.write_bytes(data.replace(old, new))


def merge_again(run: Path, gate: str) -> None:
    """The merged statistics file's entry of `gate` made from its part files' footers, as the
    writer merges them (so that it agrees with an edited footer)."""
    (merged,) = (run / "_statistics").glob("shard-*.json")
    said = json.loads(merged.read_text())
    for entry in said["entries"]:
        if (entry["table"], entry["name"]) != ("gates", gate):
            continue
        stats, tops = [], []
        for first in entry["files"]:
            footer = pq.ParquetFile(run / FOLDER / f"gate={gate}" / f"part-{first:010d}.parquet")
            meta, rows = footer.metadata.metadata, footer.metadata.num_rows
            stats.append(partstats.read(meta[partstats.FOOTER_KEY], rows))
            tops.append(read_tops(meta[TOP_KEY], rows, 3, ANY, ANY))
        entry["statistics"] = partstats.PartStats.merge(stats).fields(merged=True)
        entry["top"] = Tops.merge(tops).fields()
    merged.write_text(json.dumps(said))


def test_a_recording_as_written_passes(pristine):
    Recording(pristine).check()


def test_a_saturation_count_moved_between_units_is_named(pristine, tmp_path):
    """One value above 0.9 moved from one unit to another in the footer (totals equal), and
    the merged statistics file merged again from the footers: both read as gatetrace wrote
    them; the values pandas reads count otherwise."""
    run, part = copy(pristine, tmp_path)
    footer = pq.ParquetFile(part).metadata
    stats = partstats.read(footer.metadata[partstats.FOOTER_KEY], footer.num_rows)
    values = pq.read_table(part).to_pandas()
    counted = (values["activation"].astype(np.float64) > 0.9).groupby(values["unit"]).sum()
    assert np.array_equal(stats.above, counted.to_numpy())  # the oracle: pandas over the values
    j = int(np.argmax(stats.above))
    above = stats.above.copy()
    above[j] -= 1
    above[(j + 1) % 3] += 1
    replace_footer(part, partstats.FOOTER_KEY, dataclasses.replace(stats, above=above).encode())
    merge_again(run, "i")
    Recording(run).activation_statistics(LSTM, "i")  # read and believed, unchecked
    with pytest.raises(RecordingError) as err:
        Recording(run).check()
    message = str(err.value)
    assert f"{part.relative_to(tmp_path)} is not a part file gatetrace wrote" in message
    assert "statistics are not those of the values it holds" in message
    assert "\n" not in message


def test_a_top_value_that_is_not_the_stored_one_is_named(pristine, tmp_path):
    """A unit's highest activation in the footer raised to a value no row holds there."""
    run, part = copy(pristine, tmp_path)
    footer = pq.ParquetFile(part).metadata
    tops = read_tops(footer.metadata[TOP_KEY], footer.num_rows, 3, ANY, ANY)
    values = pq.read_table(part).to_pandas()
    u = int(np.argmin(tops.values[:, 0]))
    e, s = int(tops.examples[u, 0]), int(tops.steps[u, 0])
    at = (values["example"] == e) & (values["step"] == s) & (values["unit"] == u)
    stored = values.loc[at, "activation"]
    assert stored.tolist() == [tops.values[u, 0]]  # the oracle: the row pandas reads
    lied = tops.values.copy()
    lied[u, 0] = np.float32(0.99609375)
    assert lied[u, 0] != tops.values[u, 0]
    replace_footer(part, TOP_KEY, dataclasses.replace(tops, values=lied).encode())
    merge_again(run, "i")
    with pytest.raises(RecordingError, match="top values are not those of the values it holds"):
        Recording(run).check()


def test_a_part_file_rewritten_without_checksums_is_named(pristine, tmp_path):
    """The second part file of gate i rewritten by pyarrow (no page checksums, its footer's
    statistics gone), one value changed, among files that carry checksums."""
    run, part = copy(pristine, tmp_path)
    table = pq.read_table(part)
    activation = table.column("activation").to_numpy().copy()
    activation[0] = np.float32(0.5)
    table = table.set_column(table.schema.get_field_index("activation"), "activation", [activation])
    table = table.replace_schema_metadata({})
    pq.write_table(table, part)
    with pytest.raises(RecordingError) as err:
        Recording(run).check()
    message = str(err.value)
    assert f"{part.relative_to(tmp_path)} is not a part file gatetrace wrote" in message
    assert "carry no checksums" in message


@pytest.mark.parametrize(
    "folder",
    [f"{FOLDER}/gate=zz", "gates/cell=ghost/gate=i", "outputs/output=ghost"],
)
def test_a_folder_the_description_does_not_list_is_named(pristine, tmp_path, folder):
    """A folder of no gate, cell or output the description lists, holding a part file pandas
    reads with the table."""
    run, part = copy(pristine, tmp_path)
    (run / folder).mkdir(parents=True)
    shutil.copy(part, run / folder / part.name)
    with pytest.raises(RecordingError) as err:
        Recording(run).check()
    message = str(err.value)
    assert f"{run}/{folder}/ holds 1 files ({part.name}, ...)" in message
    assert "\n" not in message
