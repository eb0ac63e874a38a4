"""Numbers and page style written once: CLI tables, reports and the viewer format the same way."""

from __future__ import annotations

import pytest

from grandrounds.core.display import BASE_CSS, fmt, fmt_ci
from grandrounds.reports import html
from grandrounds.viewer.page import PAGE_HTML


@pytest.mark.parametrize(
    "value, digits, want",
    [
        (None, 3, "n/a"),
        (0.5, 3, "0.500"),
        (2 / 3, 2, "0.67"),
        (12, 3, "12"),
        (0.0, 1, "0.0"),
        (-0.125, 2, "-0.12"),
    ],
)
def test_fmt(value, digits, want):
    assert fmt(value, digits) == want


@pytest.mark.parametrize(
    "ci, digits, want",
    [
        (None, 3, "n/a"),
        ((0.25, 0.75), 3, "[0.250, 0.750]"),
        ([0.1, 0.9], 1, "[0.1, 0.9]"),
        ((), 3, "n/a"),
    ],
)
def test_fmt_ci(ci, digits, want):
    assert fmt_ci(ci, digits) == want


def test_report_and_viewer_share_one_style():
    assert html.CSS.startswith(BASE_CSS)
    assert BASE_CSS in PAGE_HTML
    for rule in (".met{", ".unmet{", ".unknown{", ".ans{", ".q{"):
        assert BASE_CSS.count(rule) == 1 and rule not in html.CSS[len(BASE_CSS) :].replace(
            ".ans{max", ""
        )
