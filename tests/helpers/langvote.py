"""The single best-scoring language of a text, for the corpus tests (the product only needs
`matches_language`: does a paragraph belong to its page's language)."""

from __future__ import annotations

from langadapt.corpora.langvote import stopword_scores


def vote_language(text: str) -> str | None:
    """The single best-scoring language, or None when no stopword occurs or the top score is tied."""
    scores = stopword_scores(text)
    ranked = sorted(scores.values(), reverse=True)
    if ranked[0] == 0.0 or ranked[0] - ranked[1] < 1e-9:
        return None
    return max(scores, key=scores.__getitem__)
