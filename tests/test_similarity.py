"""Similarity backends for semantic repeat: lexical (always), embedding (real model, ``-m semantic``)."""

from __future__ import annotations

import random
import re

import pytest

from otelloop import similarity
from otelloop.similarity import LexicalSimilarity, get_backend, is_negated
from tests.helpers import SeedRun, make_step

WEATHER = 'search_web({"query": "weather in Paris today"}) → empty'
HOSTS = 'read_file({"path": "/etc/hosts"}) → success'
#: Paraphrases that share few words: a loop only an embedding sees.
FLIGHTS = [
    'search_web({"query": "cheap flights to Tokyo"}) → empty',
    'search_web({"query": "low-cost airfare to Tokyo"}) → empty',
    'search_web({"query": "budget plane tickets Tokyo"}) → empty',
    'search_web({"query": "inexpensive air travel to Tokyo"}) → empty',
]
UNRELATED = [
    'search_web({"query": "history of the Roman empire"}) → empty',
    'read_file({"path": "/etc/hosts"}) → success',
    'run_command({"command": "git status"}) → success',
    'send_email({"to": "ops@example.com", "subject": "weekly report"}) → success',
]


def test_lexical_identical_descriptors_score_exactly_one() -> None:
    backend = LexicalSimilarity()
    for text in (WEATHER, HOSTS, "a a a b", "x"):
        a, b = backend.vectors([text, text + ""])
        assert backend.cosine(a, b) == 1.0
    assert backend.similarities(WEATHER, [WEATHER]) == [1.0]


@pytest.mark.parametrize("a, b, low, high", [
    (WEATHER, 'search_web({"query": "today in Paris weather"}) → empty', 1.0, 1.0),  # reordered
    ('search_web({"query": "weather Paris"}) → empty', 'search_web({"query": "weather in Paris"}) → empty',
     0.85, 0.99),  # one word added
    ('read_file({"path": "src/a.py"}) → success', 'read_file({"path": "src/b.py"}) → success', 0.0, 0.8),
    ('run_command({"command": "pytest tests/test_a.py"}) → error',
     'run_command({"command": "pytest tests/test_b.py"}) → error', 0.0, 0.84),
    (WEATHER, HOSTS, 0.0, 0.0),
], ids=["reordered", "word_added", "other_file", "other_test_file", "unrelated"])
def test_lexical_similarity(a: str, b: str, low: float, high: float) -> None:
    (sim,) = LexicalSimilarity().similarities(a, [b])
    assert low <= sim <= high


def test_lexical_is_case_insensitive_and_deterministic() -> None:
    a, b = LexicalSimilarity(), LexicalSimilarity()
    assert a.similarities("Search PARIS", ["search paris"]) == [1.0]
    assert a.similarities(WEATHER, FLIGHTS) == b.similarities(WEATHER, FLIGHTS)


def test_cache_counts_hits_and_stays_bounded() -> None:
    backend = LexicalSimilarity(cache_size=3)
    backend.vectors(["a", "b", "a"])
    assert (backend.misses, backend.hits) == (2, 0)  # a duplicate within one batch is computed once
    backend.vectors(["a", "b"])
    assert (backend.misses, backend.hits) == (2, 2) and backend.hit_rate() == 0.5
    backend.vectors(["c", "d", "e"])
    assert len(backend._cache) == 3


def test_missing_vectors_are_computed_in_one_batch() -> None:
    batches: list[list[str]] = []

    class Spy(LexicalSimilarity):
        def _compute(self, texts: list[str]) -> list[dict[str, int]]:
            batches.append(texts)
            return super()._compute(texts)

    backend = Spy()
    backend.vectors(["a"])
    backend.similarities("b", ["a", "c", "d"])
    assert batches == [["a"], ["b", "c", "d"]]


@pytest.mark.parametrize("text, negated", [
    ('search({"q": "not python"})', True), ("don't retry", True), ("without cache", True),
    ("No results", True), ('search({"q": "python notes"})', False), ("nothing", False), ("cannon", False),
])
def test_is_negated(text: str, negated: bool) -> None:
    assert is_negated(text) is negated


def test_is_negated_is_the_whole_word_pattern() -> None:
    """The word-by-word reading says what one case-insensitive pattern over whole words says, on random
    texts joined from pieces of negations, apostrophes, separators and the dotted and dotless i (whose case
    forms differ from plain "i")."""
    pattern = re.compile(r"\b(?:not|no|never|none|nor|neither|without|cannot|\w+n['’]t)\b", re.IGNORECASE)
    pieces = ["not", "No", "NEVER", "none", "nor", "nEither", "without", "cannot", "do", "n", "t", "T", "'", "’",
              " ", "_", "-", "1", "é", "\u0130", "\u0131", "\u0307", "w", "th", "ne", "out", "ot", "can",
              "w\u0130thout", "ne\u0131ther"]
    rng = random.Random(7)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 7))) for _ in range(100_000)]
    differ = [t for t in texts if is_negated.__wrapped__(t) is not (pattern.search(t) is not None)]
    assert differ == []
    assert sum(map(is_negated.__wrapped__, texts)) > 10_000  # negated and not negated texts alike


def test_backends_are_process_wide() -> None:
    assert get_backend("off") is None
    assert get_backend("lexical") is get_backend("lexical")
    with pytest.raises(ValueError, match="unknown similarity backend"):
        get_backend("fuzzy")


def test_embedding_backend_names_the_extra_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(similarity, "EMBEDDING_MODULES", ("otelloop_no_such_module",))
    with pytest.raises(RuntimeError, match=r"pip install 'otelloop\[semantic\]'"):
        get_backend("embedding")


# ---------------------------------------------------------------------------------------------------
# The embedding backend with the real model: the ``semantic`` extra (skipped without it, see extras.py)

@pytest.mark.semantic
def test_embedding_catches_paraphrases_that_lexical_misses() -> None:
    embedding, lexical = get_backend("embedding"), LexicalSimilarity()
    assert embedding is not None
    for other in FLIGHTS[1:]:
        assert embedding.similarities(FLIGHTS[0], [other])[0] >= 0.85, other
        assert lexical.similarities(FLIGHTS[0], [other])[0] < 0.85, other


@pytest.mark.semantic
def test_embedding_keeps_unrelated_calls_apart() -> None:
    embedding = get_backend("embedding")
    assert embedding is not None
    for text in FLIGHTS:
        assert max(embedding.similarities(text, UNRELATED)) < 0.85, text


@pytest.mark.semantic
def test_embedding_identical_descriptors_score_one() -> None:
    embedding = get_backend("embedding")
    assert embedding is not None
    assert embedding.similarities(WEATHER, [WEATHER]) == [1.0]
    a, b = embedding.vectors([WEATHER, HOSTS])
    assert embedding.cosine(a, a) == pytest.approx(1.0, abs=1e-5) and embedding.cosine(a, b) < 0.5


def paraphrase_session(texts: list[str]) -> list:
    return [make_step("search_web", i=i, args_hash=i, args_text=t.split("(", 1)[1].rsplit(")", 1)[0],
                      outcome="empty") for i, t in enumerate(texts)]


@pytest.mark.semantic
@pytest.mark.parametrize("backend, fires", [("embedding", True), ("lexical", False)])
def test_detector_semantic_repeat_by_backend(backend: str, fires: bool) -> None:
    # the seed profile's semantic repeat, which compares the calls' wording alone (the default profile
    # also needs the calls to have brought nothing new, and four of them)
    run = SeedRun("trajectory", detectors={"trajectory": {"similarity": backend}})
    ctxs = run.run(paraphrase_session(FLIGHTS))
    assert [c.attributes["otelloop.loop_score"] for c in ctxs[:3]] == [0, 0, 0]
    assert (ctxs[3].attributes["otelloop.loop_score"] > 1.2) is fires
    assert ("semantic_repeat" in run.session().state("trajectory").types) is fires
