"""A training run's folder read as a series: each checkpoint keyed by what its trainer wrote.

Keras files are named by `ModelCheckpoint(filepath)`, a format string Keras fills with
`filepath.format(epoch=epoch + 1, **logs)`; the names below are made the same way, from the
filepaths Keras' own documentation shows. TF1 runs are listed by their `checkpoint` state file,
as `Saver.save` writes it. Every file of a checkpoint must be a regular file inside the folder.
Nothing here loads a model: the folders hold empty files of the right names.
"""

from __future__ import annotations

import os

import pytest

from recorders.errors import ModelFormatError, SelectionError
from tests.conftest import run_cli
from tracer.load.series import epochs_of, find_series

LOSSES = [0.39, 0.38, 0.37, 0.36]  # falling as training goes on: a metric that runs backwards


def keras_names(filepath: str, epochs=range(1, 5), **extra) -> list[str]:
    """The names ModelCheckpoint gives `filepath` at the end of each epoch."""
    return [
        filepath.format(epoch=e, val_loss=LOSSES[e - 1], loss=LOSSES[e - 1] + 0.1, **extra)
        for e in epochs
    ]


@pytest.mark.parametrize(
    "filepath",
    [
        "weights.{epoch:02d}-{val_loss:.2f}.hdf5",  # Keras 2's documented example
        "model-{epoch:02d}-{val_loss:.2f}.keras",  # Keras 3's
        "model-{epoch:02d}.keras",
        "lstm2-{epoch:02d}.h5",  # a prefix holding digits
        "run3/ckpt_{epoch}_{loss:.4f}_{val_loss:.4f}.h5",  # folders, two metrics, no padding
        "{epoch:03d}.h5",
    ],
)
def test_the_epoch_is_the_field_keras_wrote_whatever_surrounds_it(tmp_path, filepath):
    names = keras_names(filepath.rpartition("/")[2])
    assert epochs_of(sorted(names), None, "run") == [(e, names[e - 1]) for e in range(1, 5)]
    assert epochs_of(sorted(names), filepath, "run") == [(e, names[e - 1]) for e in range(1, 5)]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "best.h5").write_bytes(b"")  # saved with save_best_only under a fixed name
    found = find_series(tmp_path)
    assert [(c.key, c.value) for c in found] == [("epoch", e) for e in range(1, 5)]
    assert [os.path.basename(c.path) for c in found] == names


def test_names_that_cannot_say_the_epoch_are_refused_with_how_to_choose():
    # an integer metric after the epoch: two whole numbers change from file to file
    names = ["model-01-17.h5", "model-02-12.h5", "model-03-31.h5"]
    with pytest.raises(ModelFormatError, match=r"2 whole numbers .* could be the epoch; .*--names"):
        epochs_of(names, None, "run")
    assert epochs_of(names, "model-{epoch:02d}-{errors:d}.h5", "run") == [
        (1, "model-01-17.h5"),
        (2, "model-02-12.h5"),
        (3, "model-03-31.h5"),
    ]
    with pytest.raises(ModelFormatError, match=r"2 whole numbers of lstm2-05\.h5 could be"):
        epochs_of(["lstm2-05.h5"], None, "run")  # one file: its prefix's digit or the epoch?
    with pytest.raises(ModelFormatError, match=r"named in 2 ways .*--names"):
        epochs_of(["model-01.h5", "model-02.h5", "other-7-a.h5"], None, "run")
    with pytest.raises(SelectionError, match=r"one \{epoch\} field"):
        epochs_of(names, "model-{val_loss:.2f}.h5", "run")
    with pytest.raises(ModelFormatError, match=r"no file of run is named so"):
        epochs_of(names, "weights.{epoch:02d}.hdf5", "run")


def test_two_files_of_one_epoch_are_refused():
    with pytest.raises(ModelFormatError, match=r"model-01\.h5 and model-1\.h5, both of epoch 1"):
        epochs_of(["model-01.h5", "model-1.h5", "model-02.h5"], None, "run")
    with pytest.raises(ModelFormatError, match=r"both of epoch 2"):
        epochs_of(["w.02-0.40.h5", "w.02-0.38.h5"], "w.{epoch:02d}-{val_loss:.2f}.h5", "run")


def test_an_ambiguous_folder_is_one_line_on_the_command_line(tmp_path):
    for name in ("model-01-17.h5", "model-02-12.h5"):
        (tmp_path / name).write_bytes(b"")
    done = run_cli("record", str(tmp_path), "--checkpoints", "all", "--out", str(tmp_path / "s"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--names 'model-{epoch:02d}" in done.stderr
    assert not (tmp_path / "s").exists()


def tf1_run(folder, prefixes, steps_files=("index", "meta", "data-00000-of-00001")) -> None:
    """A TF1 run's folder as `Saver.save` leaves it: each prefix's files and the state file."""
    folder.mkdir(exist_ok=True)
    for p in prefixes:
        for suffix in steps_files:
            (folder / f"{p}.{suffix}").write_bytes(b"")
    listed = "".join(f'all_model_checkpoint_paths: "{p}"\n' for p in prefixes)
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{prefixes[-1]}"\n{listed}')


def test_tf1_global_steps_and_two_prefixes_of_one_step(tmp_path):
    tf1_run(tmp_path / "run", ["model.ckpt-100", "model.ckpt-200"])
    found = find_series(tmp_path / "run")
    assert [(c.key, c.value) for c in found] == [("checkpoint", 100), ("checkpoint", 200)]
    tf1_run(tmp_path / "twice", ["model.ckpt-200", "model.ckpt-0200"])
    with pytest.raises(
        ModelFormatError, match=r"model.ckpt-200 and model.ckpt-0200, both of global step 200"
    ):
        find_series(tmp_path / "twice")


@pytest.mark.parametrize("suffix", ["meta", "data-00000-of-00001", "index"])
def test_a_tf1_checkpoint_file_linking_to_another_run_is_refused(tmp_path, suffix):
    tf1_run(tmp_path / "other", ["model.ckpt-200"])
    tf1_run(tmp_path / "run", ["model.ckpt-100", "model.ckpt-200"])
    (tmp_path / "run" / f"model.ckpt-200.{suffix}").unlink()
    (tmp_path / "run" / f"model.ckpt-200.{suffix}").symlink_to(
        tmp_path / "other" / f"model.ckpt-200.{suffix}"
    )
    with pytest.raises(ModelFormatError, match=rf"model.ckpt-200.{suffix} links out of the folder"):
        find_series(tmp_path / "run")


def test_special_files_in_a_run_folder_are_refused_never_opened(tmp_path):
    tf1_run(tmp_path / "run", ["model.ckpt-100"])
    (tmp_path / "run" / "model.ckpt-100.meta").unlink()
    os.mkfifo(tmp_path / "run" / "model.ckpt-100.meta")  # opened for reading, it would block
    with pytest.raises(ModelFormatError, match=r"model.ckpt-100.meta is not a regular file"):
        find_series(tmp_path / "run")
    (tmp_path / "run" / "checkpoint").unlink()
    os.mkfifo(tmp_path / "run" / "checkpoint")
    with pytest.raises(ModelFormatError, match=r"cannot read its 'checkpoint' file: .*FIFO"):
        find_series(tmp_path / "run")
    (tmp_path / "keras").mkdir()
    (tmp_path / "keras" / "model-01.keras").write_bytes(b"")
    (tmp_path / "keras" / "model-02.keras").symlink_to("/dev/zero")
    with pytest.raises(ModelFormatError, match=r"model-02.keras links out of the folder"):
        find_series(tmp_path / "keras")


def test_a_run_folder_named_through_a_link_is_read_as_the_folder(tmp_path):
    """`runs/latest -> runs/2026-11-26`: the user named the link; its files are inside its target."""
    tf1_run(tmp_path / "2026-11-26", ["model.ckpt-100", "model.ckpt-200"])
    (tmp_path / "latest").symlink_to(tmp_path / "2026-11-26", target_is_directory=True)
    found = find_series(tmp_path / "latest")
    assert [(c.key, c.value) for c in found] == [("checkpoint", 100), ("checkpoint", 200)]
