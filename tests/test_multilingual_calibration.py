"""The calibrations `brain.server.measure.multilingual_calibration` compares, on vectors
built by hand (no model): what each one computes and how its threshold is chosen."""

from __future__ import annotations

import numpy as np

from brain.server.measure.multilingual_calibration import (
    Asked,
    auc,
    features,
    step_above,
    tally,
)


def test_threshold_is_the_first_step_above_every_value() -> None:
    assert step_above([0.801, 0.844], 0.01) == 0.85
    assert round(step_above([0.84], 0.01), 10) == 0.85  # a value on a step is not above it
    assert round(step_above([3.05], 0.1), 10) == 3.1


def test_auc_counts_ordered_pairs_and_ties_as_half() -> None:
    assert auc([0.9, 0.8], [0.7]) == 1.0
    assert auc([0.7], [0.9, 0.8]) == 0.0
    assert auc([0.8], [0.8]) == 0.5


def test_centring_removes_the_direction_every_vector_shares() -> None:
    # Every vector leans on the first axis (e5's anisotropy); the query is about axis 2,
    # memory 0 about axis 2 too, memory 1 about axis 3.
    shared = np.array([1.0, 0.0, 0.0, 0.0])

    def unit(v: list[float]) -> np.ndarray:
        x = np.asarray(v)
        out: np.ndarray = x / np.linalg.norm(x)
        return out

    query = unit([3.0, 1.0, 0.0, 0.0])
    memories = np.stack([unit([3.0, 1.0, 0.2, 0.0]), unit([3.0, 0.0, 0.0, 1.0])])
    values = features(query[None, :], memories, (shared * 0.9)[None, :])
    raw, first = values["cosine"][:, 0]
    centred, centred_first = values["centred"][:, 0]
    assert int(first) == 0 and int(centred_first) == 0
    assert raw > 0.99  # nearly identical raw ...
    assert float(query @ memories[1]) > 0.85  # ... and the unrelated one high too
    # centred, the unrelated memory falls to about 0 while the answer stays high
    assert centred > 0.9
    centre = shared * 0.9
    a, b = query - centre, memories[1] - centre
    assert abs(float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))) < 0.2
    assert values["-second"][0, 0] == raw - float(query @ memories[1])


def test_tally_counts_answers_only_when_the_search_answers() -> None:
    asked = [
        Asked("en1", 0.5, ("en1", "en2")),
        Asked("en3", 0.01, ("en4", "en3")),
        Asked(None, 0.01, ("en5",)),
    ]
    assert tally(asked, lambda i: True) == (1, 2, 0)
    assert tally(asked, lambda i: i == 0) == (1, 1, 1)
