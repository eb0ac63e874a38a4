"""Script Concordance Test scoring: aggregate (panel) scoring.

Each rating of the five-point scale (-2..+2) is worth the number of panel members who chose it divided
by the number who chose the modal rating, so the modal answer scores 1 and a minority answer partial
credit (Charlin et al., "The Script Concordance test", Eval Health Prof 2000; the SCT-Public env of
Medmarks, ``sct_rubric``: ``ans_distribution / np.max(ans_distribution)``, indexed by rating + 2).
The published panel rows are raw counts (Open Medical SCT) or already max-normalised (Adelaide SCT);
the division treats both alike.
"""

from __future__ import annotations

from collections.abc import Sequence

RATINGS = (-2, -1, 0, 1, 2)


def panel_score(panel: Sequence[float], rating: int) -> float:
    """The credit of ``rating`` (-2..+2) given the panel's five scores (for -2..+2, in that order)."""
    if len(panel) != 5 or rating not in RATINGS:
        raise ValueError(
            f"need five panel scores and a rating in -2..+2, got {list(panel)} and {rating!r}"
        )
    top = max(panel)
    if top <= 0:
        raise ValueError(f"a panel with no positive score: {list(panel)}")
    return float(panel[rating + 2]) / float(top)


def modal_rating(panel: Sequence[float]) -> int:
    """The panel's modal rating (the first one on a tie, as numpy's argmax)."""
    return RATINGS[max(range(5), key=lambda i: (panel[i], -i))]
