"""Which of six languages a paragraph is in, by a weighted stopword vote.

Used by the Debian corpus builder to drop the English fallback strings of partly translated
pages. The lists are hand-written on purpose: six languages do not justify a language-ID
dependency, and the question is narrow (is this paragraph in the page's language, or in English
or a neighbour?). Bokmål, Nynorsk, Danish and Swedish share most function words, so each hit is
weighted 1/k, where k is the number of lists containing the word: shared words ("og", "i",
"som") barely count, and the words that tell the languages apart (nb "ikke/jeg/hva/ble",
nn "ikkje/eg/kva/vert", da "af/efter/hvad/blev", sv "och/att/är/inte") decide.
"""

from __future__ import annotations

import re

STOPWORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words.split())
    for lang, words in {
        "nb": """og i det som er en et på til at av for med har de ikke den om var jeg seg men vi
            fra du kan så også eller ble blir hvis når etter bare være vil skal dette disse noe
            noen hva hvordan hvor mye mellom hun andre ved over kunne enn slik må nå sin sitt
            sine alle uten deg dem meg hadde hvilke selv fordi mens ut gjennom""",
        "nn": """og i det som er ein eit på til at av for med har dei ikkje den om var eg seg men
            vi frå du kan så òg også eller vart vert blir blei viss dersom når etter berre vere
            vil skal dette desse noko nokon nokre kva korleis kor mykje mellom ho andre ved over
            kunne enn slik må no sin sitt sine alle utan deg meg hadde kvar sjølv fordi medan ut
            gjennom""",
        "da": """og i det som er en et på til at af for med har de ikke den om var jeg sig men vi
            fra du kan så også eller blev bliver hvis når efter kun bare være vil skal dette
            disse noget nogle hvad hvordan hvor meget mellem hun andre ved over kunne end sådan
            må nu sin sit sine alle uden dig dem mig havde hvilke selv fordi mens ud gennem""",
        "sv": """och i det som är en ett på till att av för med har de inte den om var jag sig men
            vi från du kan så också eller blev blir när efter bara vara vill ska skall detta
            dessa något några vad hur mycket mellan hon andra vid över kunna än sådan måste nu
            sin sitt sina alla utan dig dem mig hade vilka själv eftersom medan ut genom finns""",
        "en": """the of and to a in is it that for on with as are this be by or from at an not you
            can which if was will have has but they their there when what use these all more
            been its also into one only other some than then so such used using do does your
            would should may how""",
        "fi": """ja on ei se että tai kuin joka jos mutta voi myös ovat oli tämä sen kun niin
            jotka vain ole olla kanssa mukaan sekä jälkeen siitä tässä nämä sitä hän ne mitä mikä
            kaikki jo voit voidaan tätä sitten kuten ennen koska jossa näin tämän joten nyt""",
    }.items()
}

# 1/k weight of each word, k = how many of the lists contain it.
_WEIGHTS: dict[str, float] = {}
for _words in STOPWORDS.values():
    for _w in _words:
        _WEIGHTS[_w] = 1.0 / sum(_w in other for other in STOPWORDS.values())

_WORD = re.compile(r"[^\W\d_]+")
#: Share of a paragraph's words that must be stopwords of the claimed language.
MIN_DENSITY = 0.1


def stopword_scores(text: str) -> dict[str, float]:
    """Weighted stopword hits per language (0.0 for a language with none)."""
    scores = dict.fromkeys(STOPWORDS, 0.0)
    for word in _WORD.findall(text.lower()):
        weight = _WEIGHTS.get(word)
        if weight is not None:
            for lang, words in STOPWORDS.items():
                if word in words:
                    scores[lang] += weight
    return scores


def matches_language(text: str, lang: str, fallback: str = "en") -> bool:
    """True when `lang` has stopword evidence, no language has more, and it beats `fallback`.

    Running text is 30-50% function words; a list of names or a menu path with one stray "den"
    is not, hence MIN_DENSITY. A tie with a neighbour keeps the paragraph: a short sentence of words shared by nb and da
    carries no evidence against the page's own language, and dropping it would only lose real
    translated text. A tie with the fallback language (English, what untranslated strings are
    left in) drops it: "Package Manager for OS X" scores the same for nb and en through "for".
    """
    words = _WORD.findall(text.lower())
    if not words or sum(w in STOPWORDS[lang] for w in words) < MIN_DENSITY * len(words):
        return False
    scores = stopword_scores(text)
    top = max(scores.values())
    beats_fallback = lang == fallback or scores[lang] > scores[fallback] + 1e-9
    return scores[lang] >= top - 1e-9 and beats_fallback
