"""At-least-once delivery: spans that arrive twice, and spans that an otelloop enriched before
(docs/detectors.md#duplicates).

OTLP exporters and the Collector's ``retry_on_failure`` re-send a request whose answer was lost, and
``otelloop analyze`` may read two recordings that overlap. A step counted twice would look like a
repetition (the very thing detectors look for) and would double a session's cost. So each session keeps
a fingerprint of its last :data:`SEEN_SPANS` step spans, and a step whose (trace id, span id) is among
them changes nothing: it is forwarded as it came and counted in ``otelloop_spans_duplicate_total``.

A span may also arrive already enriched: a second otelloop in the path (an agent-side sidecar and a
gateway), or a re-sent span that an earlier otelloop process forwarded. Appending attributes and events
to such a span would give it every ``otelloop.*`` key twice (invalid OTLP: keys of a span are unique), so
the pipeline rewrites it instead: what an otelloop wrote is removed, then this pass's enrichment added.
What an otelloop writes is known by name (:data:`OUTPUT_KEYS`, :func:`is_output_key`,
:func:`is_output_event`); the attributes agents send to otelloop (``otelloop.step.kind``,
``otelloop.intent``, ``otelloop.progress.*``, ``otelloop.state_hash``) are inputs and are kept.
"""

from __future__ import annotations

import struct
from typing import Any

#: Step spans per session whose fingerprints are kept to recognise a re-delivered one: 8 bytes each
#: (3 KiB per session at most with its filters, in its state). A re-sent request carries spans the session saw moments
#: ago; one holding more than this many steps of a single session may have its oldest ones counted again.
SEEN_SPANS = 256
_FINGERPRINT = struct.Struct("<q")
_WIDTH = _FINGERPRINT.size
_RING_BYTES = SEEN_SPANS * _WIDTH
#: Within one call the ring may grow to this before its oldest are dropped (fewer, larger moves).
_TRIM_AT = 2 * _RING_BYTES

#: Span attributes otelloop writes on step spans (docs/detectors.md): the verdict and the scores. A span
#: carrying one of them was enriched before; the reader hands such spans over with their attributes.
OUTPUT_KEYS = frozenset({
    "otelloop.verdict", "otelloop.loop_score", "otelloop.intervention", "otelloop.entropy_score",
    "otelloop.entropy_severity", "otelloop.cycle_id", "otelloop.loop_iteration"})
#: ``otelloop.*`` attributes agents send to otelloop (docs/mapping.md): inputs, never removed.
INPUT_KEYS = frozenset({"otelloop.step.kind", "otelloop.intent", "otelloop.state_hash"})
_INPUT_PREFIX = "otelloop.progress."
#: The GenAI semantic conventions' evaluation event, and the evaluation name otelloop gives its verdicts.
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "otelloop.verdict"
#: Attributes written with ``enrich.langfuse_attributes`` on spans with findings.
LANGFUSE_KEYS = ("langfuse.observation.level", "langfuse.observation.status_message")


class SeenSpans:
    """Fingerprints of a session's last :data:`SEEN_SPANS` step spans, oldest first.

    A fingerprint is 8 bytes of Python's hash of (trace id, span id): fast, cached on the id strings, and
    the same for the life of the process, which is as long as a fingerprint is kept. Two distinct spans
    share one with a probability of about 2^-64 per pair. Scanning 2 KiB of fingerprints costs a few
    µs, so once a session has a few dozen, two 512-byte Bloom filters answer "certainly not seen" for
    almost every new span (each holds at most :data:`SEEN_SPANS` fingerprints, 2 bits each of 4096: a
    "maybe" for under 3% of new spans), and the ring is scanned only on a "maybe". The filters are
    generations: the newer takes every fingerprint added, and when it has taken :data:`SEEN_SPANS` it
    becomes the older and a fresh one starts, so together they always hold every fingerprint the ring
    holds and the answer is exact.
    """

    __slots__ = ("ring", "newer", "older", "added")

    def __init__(self) -> None:
        self.ring = bytearray()
        #: the filters (None while the ring is short enough to scan)
        self.newer: bytearray | None = None
        self.older: bytearray | None = None
        #: fingerprints added to the newer filter
        self.added = 0

    def start_filters(self) -> None:
        """Build the newer filter from the ring (once, when the ring grows past a few dozen)."""
        newer = self.newer = bytearray(_BLOOM_BYTES)
        for (h,) in _FINGERPRINT.iter_unpack(self.ring):
            a, b = h & _BLOOM_MASK, (h >> 12) & _BLOOM_MASK
            newer[a >> 3] |= 1 << (a & 7)
            newer[b >> 3] |= 1 << (b & 7)
        self.added = len(self.ring) // _WIDTH


#: A filter's size (4096 bits), and the ring length from which the filters are kept.
_BLOOM_BYTES = 512
_BLOOM_MASK = _BLOOM_BYTES * 8 - 1
_FILTER_FROM = 32 * _WIDTH


def unseen(seen: SeenSpans, items: list[Any]) -> list[Any]:
    """The items (``(position, step, span info)``) whose step span ``seen`` does not hold, in order; their
    fingerprints are added (the oldest beyond :data:`SEEN_SPANS` dropped once, at the end). A match must
    start on an 8-byte boundary. A span without a span id cannot be told from another and is never taken
    for a duplicate. Written as one loop: it runs for every step."""
    ring, newer, older, pack = seen.ring, seen.newer, seen.older, _FINGERPRINT.pack
    find = ring.find
    fresh = []
    for item in items:
        step = item[1]
        span_id = step.span_id
        if not span_id or span_id == "0000000000000000":
            fresh.append(item)
            continue
        h = hash((step.trace_id, span_id))
        fp = pack(h)
        if newer is not None:
            a, b = a8, b8 = (h & _BLOOM_MASK) >> 3, ((h >> 12) & _BLOOM_MASK) >> 3
            abit, bbit = 1 << (h & 7), 1 << ((h >> 12) & 7)
            maybe = bool((newer[a] & abit and newer[b] & bbit)
                         or (older is not None and older[a8] & abit and older[b8] & bbit))
        else:
            maybe = True
        if maybe:
            at = find(fp)
            while at >= 0 and at % _WIDTH:
                at = find(fp, at + 1)
            if at >= 0:
                continue
        ring += fp
        fresh.append(item)
        if len(ring) > _TRIM_AT:
            del ring[:len(ring) - _RING_BYTES]
        if newer is not None:
            newer[a] |= abit
            newer[b] |= bbit
            seen.added += 1
            if seen.added >= SEEN_SPANS:
                older = seen.older = newer
                newer = seen.newer = bytearray(_BLOOM_BYTES)
                seen.added = 0
    excess = len(ring) - _RING_BYTES
    if excess > 0:
        del ring[:excess]
    if newer is None and len(ring) >= _FILTER_FROM:
        seen.start_filters()
    return fresh


def is_output_key(key: str) -> bool:
    """Whether an attribute key is one otelloop writes (every ``otelloop.*`` key but the inputs)."""
    return key in OUTPUT_KEYS or (key.startswith("otelloop.") and key not in INPUT_KEYS
                                  and not key.startswith(_INPUT_PREFIX))


def is_output_event(event: Any) -> bool:
    """Whether a span event (``trace_pb2.Span.Event``) is one otelloop writes: a finding (``otelloop.*``)
    or its verdict as an evaluation result. Other evaluators' results stay."""
    name = event.name
    if name.startswith("otelloop."):
        return True
    if name != EVALUATION_EVENT:
        return False
    return any(kv.key == "gen_ai.evaluation.name" and kv.value.string_value.startswith("otelloop")
               for kv in event.attributes)
