"""A probe: one L1-regularised linear model over all units at once, as Radford et al. (2017)
found their sentiment unit.

    result = probe(rec, "sentiment.npy", table="states", names=["c"])
    result.score, result.metric       # held-out accuracy (binary labels) or R^2 (numeric)
    result.units                      # the units with non-zero weight, largest first

The features are every unit of the chosen gate columns or states of the chosen cells
(`recorders.read.units.targets`), at the labelled positions with a recorded row
(`recorders.read.labels`), standardised. The examples are split at random (a fixed seed) into
training and held-out ones, so no sequence is in both; the regularisation strength is chosen by
cross-validation over the training examples (grouped by example) unless given. scikit-learn
fits the models: `LogisticRegression` with an L1 penalty (liblinear) for binary labels,
`Lasso` for numeric ones (`pip install "gatetrace[probe]"`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from recorders.errors import SelectionError, install_hint
from recorders.read.labels import Labels, gather, positions, read_labels
from recorders.read.reader import Recording
from recorders.read.units import targets

__all__ = ["probe", "ProbeResult"]

_STRENGTHS = np.logspace(-3, 0, 4)  # C of the logistic model (larger: weaker penalty)
_ALPHAS = np.logspace(-3, 0, 4)  # alpha of the Lasso (larger: stronger penalty)


@dataclass(frozen=True)
class ProbeResult:
    """A fitted probe: `metric` ("accuracy" or "r2") and its held-out `score`, beside
    `baseline` (the held-out accuracy of always answering the commoner training label, or 0.0
    for R^2); `units` (cell, table, name, column, unit, weight) with non-zero weight, largest
    |weight| first, on standardised values; the regularisation `strength` (C or alpha) and the
    positions and examples trained on and held out; `converged` False where the solver
    stopped at its iteration limit (its weights are then approximate)."""

    metric: str
    score: float
    baseline: float
    units: pd.DataFrame
    features: int
    strength: float
    converged: bool
    train: tuple[int, int]  # positions, examples
    held_out: tuple[int, int]


def probe(
    rec: Recording,
    labels: Labels | object,
    table: str = "states",
    cells: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    column: str = "activation",
    step: int | None = None,
    held_out: float = 0.25,
    strength: float | None = None,
    seed: int = 0,
) -> ProbeResult:
    """Fit the probe (see the module docstring) on `table` ("states", or "gates" with `column`)."""
    try:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import Lasso, LogisticRegression
        from sklearn.model_selection import GridSearchCV, GroupKFold
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        raise SelectionError(f"a probe needs scikit-learn: {install_hint('probe')}") from None
    if table not in ("gates", "states"):
        raise SelectionError(f"table {table!r}: expected gates or states")
    if not 0 < held_out < 1:
        raise SelectionError(f"held_out {held_out!r}: expected a share of the examples in (0, 1)")
    labels = labels if isinstance(labels, Labels) else read_labels(labels, rec.memory)
    chosen = targets(rec, cells, names, (table,), (column,))
    if step is not None:
        labels = labels.at_step(step, positions(rec, [c for c, _, _, _ in chosen]))
    features, y, examples, names_of = _features(rec, chosen, labels)
    if features.shape[1] < 2:
        raise SelectionError(
            f"a probe over {features.shape[1]} unit finds nothing a single unit's score does not: choose a "
            "selection with more units (gatetrace units ranks single units)"
        )
    ids = np.unique(examples)
    if len(ids) < 4:
        raise SelectionError(
            f"a probe needs labelled positions in at least 4 examples to train and hold some out; "
            f"these labels reach {len(ids)}"
        )
    rng = np.random.default_rng(seed)
    test_ids = rng.choice(ids, size=max(1, round(held_out * len(ids))), replace=False)
    if len(ids) - len(test_ids) < 2:
        raise SelectionError(
            f"held_out {held_out!r} leaves {len(ids) - len(test_ids)} of {len(ids)} examples to train on; "
            "hold out fewer (the default is 0.25)"
        )
    test = np.isin(examples, test_ids)
    x_train, x_test, y_train, y_test = features[~test], features[test], y[~test], y[test]
    if labels.binary:
        y_train, y_test = y_train == labels.positive, y_test == labels.positive
        train_examples = examples[~test]
        each = [len(np.unique(train_examples[y_train == v])) for v in (True, False)]
        if min(each) < 2:  # a fold of the search would train on one label
            raise SelectionError(
                f"labels: the {len(np.unique(train_examples))} training examples hold label {labels.positive:g} in "
                f"{each[0]} and other labels in {each[1]}; a probe needs each in 2 examples or more to train and "
                "choose its regularisation: give labels that vary over more examples"
            )
        model = make_pipeline(
            StandardScaler(),
            LogisticRegression(l1_ratio=1.0, solver="liblinear", random_state=seed),
        )
        grid, scoring = {"logisticregression__C": _STRENGTHS}, "neg_log_loss"
    else:
        model = make_pipeline(StandardScaler(), Lasso(max_iter=5000))
        grid, scoring = {"lasso__alpha": _ALPHAS}, "r2"
    (key,) = grid
    if strength is None:
        folds = min(3, len(np.unique(examples[~test])))
        search = GridSearchCV(
            model, grid, scoring=scoring, cv=GroupKFold(folds), error_score="raise"
        )
        with warnings.catch_warnings():  # the folds' fits: only the final one is reported
            warnings.simplefilter("ignore", ConvergenceWarning)
            try:
                search.fit(x_train, y_train, groups=examples[~test])
            except ValueError as err:  # a fold left with one label: its examples are too few
                raise SelectionError(
                    f"labels: the probe's search over {folds} folds of the training examples failed "
                    f"({str(err).splitlines()[0]}); give labels that vary over more examples"
                ) from None
        strength = float(search.best_params_[key])
    model.set_params(**{key: strength})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(x_train, y_train)
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in said)
    if labels.binary:
        score = float(model.score(x_test, y_test))  # accuracy
        baseline = float(np.mean(y_test == (y_train.mean() >= 0.5)))
    else:
        score, baseline = float(model.score(x_test, y_test)), 0.0  # R^2
    weights = np.ravel(model[-1].coef_)
    kept = np.flatnonzero(weights)
    kept = kept[np.argsort(-np.abs(weights[kept]), kind="stable")]
    units = pd.DataFrame(
        [names_of[k] for k in kept], columns=["cell", "table", "name", "column", "unit"]
    ).assign(weight=weights[kept])
    return ProbeResult(
        metric="accuracy" if labels.binary else "r2",
        score=score,
        baseline=baseline,
        units=units,
        features=features.shape[1],
        strength=strength,
        converged=converged,
        train=(int((~test).sum()), len(ids) - len(test_ids)),
        held_out=(int(test.sum()), len(test_ids)),
    )


def _features(
    rec: Recording, chosen: list[tuple[str, str, str, str]], labels: Labels
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[str, str, str, str, int]]]:
    """The units of every chosen column at the positions all of them have: float64 [positions,
    units], with the label and example of each position and the (cell, table, name, column,
    unit) of each feature."""
    gathered = [
        gather(rec, table, cell, name, column, labels) for cell, table, name, column in chosen
    ]
    keys = [g.examples.astype(np.int64) << 32 | g.steps.astype(np.int64) for g in gathered]
    common = keys[0]
    for k in keys[1:]:  # the positions every selected cell has (sorted, as gathered)
        common = np.intersect1d(common, k, assume_unique=True)
    names_of = [
        (cell, table, name, column, u)
        for (cell, table, name, column), g in zip(chosen, gathered, strict=True)
        for u in range(g.units)
    ]
    rec.allot(
        (len(common), len(names_of)),
        8,
        f"the probe's {len(names_of):,} features at {len(common):,} positions",
    )
    at = [np.searchsorted(k, common) for k in keys]
    features = np.concatenate([g.values[a] for g, a in zip(gathered, at, strict=True)], axis=1)
    first = gathered[0]
    return features.astype(np.float64), first.labels[at[0]], first.examples[at[0]], names_of
