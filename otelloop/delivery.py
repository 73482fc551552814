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
#: (2 KiB per session at most, in its state). A re-sent request carries spans the session saw moments
#: ago; one holding more than this many steps of a single session may have its oldest ones counted again.
SEEN_SPANS = 256
_FINGERPRINT = struct.Struct("<q")
_WIDTH = _FINGERPRINT.size
_RING_BYTES = SEEN_SPANS * _WIDTH

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


def fingerprint(trace_id: str, span_id: str) -> bytes | None:
    """8 bytes standing for a span's (trace id, span id), or None when the span has no span id (such a
    span cannot be told from another and is never taken for a duplicate).

    Python's string hash: fast, cached on the id strings, and the same for the life of the process,
    which is as long as a fingerprint is kept. Two distinct spans of one session share a fingerprint
    with a probability of about 2^-64 per pair.
    """
    if not span_id or span_id == "0000000000000000":
        return None
    return _FINGERPRINT.pack(hash((trace_id, span_id)))


def seen_before(ring: bytearray, fp: bytes) -> bool:
    """Whether ``fp`` is one of the fingerprints in ``ring``; if not, it is added (the oldest of a full
    ring makes room). A match must start on an 8-byte boundary."""
    at = ring.find(fp)
    while at >= 0:
        if at % _WIDTH == 0:
            return True
        at = ring.find(fp, at + 1)
    ring += fp
    if len(ring) > _RING_BYTES:
        del ring[:_WIDTH]
    return False


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
