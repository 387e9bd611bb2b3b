"""The parts every chart the server draws as an SVG image shares (app/svg_parts.py): round ticks,
plain numbers, a log axis's decades."""

from __future__ import annotations

import math

import pytest

from attnwatch.app.svg_parts import decades, minor_ticks, plain, ticks


def test_ticks_are_round_values_inside_the_range():
    assert ticks(1812.4, 1925.0) == [1820.0, 1840.0, 1860.0, 1880.0, 1900.0, 1920.0]
    small = ticks(0.0123, 0.0191)
    assert small == pytest.approx([0.013, 0.014, 0.015, 0.016, 0.017, 0.018, 0.019])
    assert all(0.0123 <= t <= 0.0191 for t in small)


def test_numbers_are_plain_never_in_exponent_form():
    assert [plain(v) for v in (54528, 1292.4, 12.0, 0.0123, 0.1, 1e4, 157.25)] == [
        "54,528",
        "1,292",
        "12",
        "0.0123",
        "0.1",
        "10,000",
        "157.2",
    ]


def test_decades_and_their_minor_ticks():
    assert decades(0.05, 2e4) == pytest.approx([0.1, 1, 10, 100, 1000, 10000])
    assert decades(1, 1000) == pytest.approx([1, 10, 100, 1000])
    minors = minor_ticks(0.5, 30)
    assert minors[0] == 0.5 and 2 in minors and 30 in minors and all(0.5 <= m <= 30 for m in minors)
    assert not any(math.log10(m).is_integer() for m in minors)
