"""The frame strip names its event and reads VIL in kg m⁻² through SEVIR's decoding rule."""

import math

import numpy as np
import pytest

from spanlift.nowcasting.plots import (
    VIL_LEVELS,
    EventLabel,
    frame_strip_figure,
    plot_frame_strip,
    vil_kg_per_m2,
)


def sevir_decoding(x: int) -> float:
    """SEVIR's piecewise VIL decoding (NeurIPS 2020 supplementary), restated point by point."""
    if x <= 5:
        return 0.0
    if x <= 18:
        return (x - 2) / 90.66
    return math.exp((x - 83.9) / 38.9)


def test_vil_conversion_is_sevirs_piecewise_rule_at_every_level():
    digital = np.arange(256)
    expected = np.array([sevir_decoding(int(x)) for x in digital])
    np.testing.assert_allclose(vil_kg_per_m2(digital), expected, rtol=1e-12)
    # anchors: branch ends, and the top of the scale (~81 kg m⁻²)
    assert vil_kg_per_m2(5) == 0.0
    assert vil_kg_per_m2(18) == pytest.approx(0.17648, abs=1e-5)
    assert vil_kg_per_m2(19) == pytest.approx(0.18855, abs=1e-5)
    assert vil_kg_per_m2(255) == pytest.approx(81.33, abs=0.01)
    assert np.all(np.diff(vil_kg_per_m2(digital[5:])) > 0)  # monotone above the floor


def test_the_strip_names_the_event_and_labels_the_colour_bar_in_kg_per_m2(tmp_path):
    rng = np.random.default_rng(0)
    past, future = rng.uniform(0, 255, (7, 16, 16)), rng.uniform(0, 255, (6, 16, 16))
    event = EventLabel("S728503", "2019-06-23 21:05", 35.14, -97.42)
    figure = frame_strip_figure(past, future, {"persistence": past[-1:].repeat(6, 0)}, event=event)
    assert figure.get_suptitle() == "event S728503 · 2019-06-23 21:05 UTC · 35.1°N 97.4°W"
    colorbar = figure.axes[-1]
    assert colorbar.get_ylabel() == "VIL (kg m⁻²)"
    labels = [tick.get_text() for tick in colorbar.get_yticklabels()]
    assert labels == [f"{sevir_decoding(level):.2g}" for level in VIL_LEVELS]
    assert EventLabel("S1", "2018-01-01 00:00").title() == "event S1 · 2018-01-01 00:00 UTC"
    path = plot_frame_strip(past, future, {}, tmp_path / "strip.png", event=event)
    assert path.stat().st_size > 5_000
