"""What a tool's result text says beyond its bytes: volatile parts, "nothing found", "it failed".

Telling a loop from progress turns on whether a tool result is new information. Two runs of the same
test suite that fail the same way differ in their timing line (``1 failed in 0.03s``), two searches that
find nothing say so in different words (``No results for 'x'``), and a command's failure often arrives as
ordinary output rather than as an error status. This module owns those readings of result texts:

- :func:`normalise_result`: the volatile parts (durations, clock times, dates, uuids, memory addresses,
  long hex ids, temporary paths) replaced by placeholders before a result is hashed, so the same result
  of two runs hashes the same while counts (``3 failed`` vs ``2 failed``) and states (``running`` vs
  ``done``) still differ;
- :func:`result_flags`: whether a result is blank (says nothing: empty, ``none``, ``no results …``,
  ``not found``), whether it reports a failure (a failing test summary, a traceback, a non-zero exit),
  and whether it only acknowledges an action (``ok``, ``Saved``), so that what tells two such calls
  apart is what they were asked to do.

Everything here is a pure function of the text, memoised by the caller with the result's hash.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from otelloop.mapping import noise

#: The result says nothing (an empty or "nothing found" answer).
BLANK = 1
#: The result reports a failure (failing tests, a traceback, a non-zero exit status).
FAILED = 2
#: The result only acknowledges an action (``ok``, ``Saved``, ``File written successfully``).
ACK = 4
#: The failure is transient by its status (see :func:`transient_failure`): retrying it may succeed.
TRANSIENT = 8
#: The result is short (:data:`_TERSE_MAX_CHARS` or less) and no failure: a status, an acknowledgement,
#: an empty answer. Alike answers of this kind to calls on different targets are a batch, not a loop
#: (:mod:`otelloop.work`); a long result that repeats across targets still counts.
TERSE = 16

#: Results longer than this are never blank or acknowledgements; only their tail is searched for a
#: failure summary.
_BLANK_MAX_CHARS = 300
_ACK_MAX_CHARS = 120
_TERSE_MAX_CHARS = 120
_FAILURE_TAIL_CHARS = 4096

def _ids_only(match: re.Match[str]) -> str:
    """A run of hex digits is an id when it mixes letters and digits (``deadbeef`` and ``20261125`` stay)."""
    run = match.group()
    if run.isdigit() or run.isalpha():
        return run
    return "<id>"


#: (pattern, replacement, gate): the gate is a cheaper search that every match of the pattern also
#: matches — a literal, or one beginning with a literal, which the engine finds as fast as a substring —
#: or None when no such search is known. A gate costs a fraction of the pattern's search, and most results
#: hold no such part at all.
#:
#: Each pattern begins with a literal or a character class, never with ``\b``: the regular expression
#: engine then skips ahead to where a match can begin instead of trying every position, which halves
#: the cost of a search. The word boundary a match must begin at is checked just after its first
#: character, by a lookbehind over that character and the one before it (``X(?<!\wX)`` is ``\bX``
#: for a word character ``X``, including at the start of the text).
_VOLATILE: tuple[tuple[re.Pattern[str], Any, re.Pattern[str] | None], ...] = (
    (re.compile(r"[0-9a-fA-F](?<!\w[0-9a-fA-F])[0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                r"[0-9a-fA-F]{12}\b"), "<uuid>", re.compile(r"-[0-9a-fA-F]{4}-")),
    (re.compile(r"\d(?<!\w\d)\d{3}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"),
     "<date>", re.compile(r"-\d\d-")),
    # HTTP dates (RFC 9110 IMF-fixdate): "Tue, 25 Nov 2026 10:00:00 GMT".
    (re.compile(r"(?<!\w)(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                r"\d{4} \d{2}:\d{2}:\d{2} GMT"), "<date>", re.compile(" GMT")),
    (re.compile(r"\d(?<!\w\d)\d?:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>", re.compile(r":\d\d:")),
    (re.compile(r"/(?:private/)?(?:tmp|var/tmp|var/folders|dev/shm)/[^\s'\":,)\]]*"), "<tmp>",
     re.compile("/(?:tmp|var/folders|dev/shm)/")),
    (re.compile(r"0(?<!\w0)x[0-9a-fA-F]{4,}\b"), "<addr>", re.compile("0x")),
    # Ids: long runs of hex digits mixing letters and digits (commit shas, request ids, object ids).
    (re.compile(r"[0-9a-fA-F](?<!\w[0-9a-fA-F])[0-9a-fA-F]{7,}\b"), _ids_only, None),
    # Relative ages ("3 minutes ago", "5s ago"), compact durations ("1h2m3s", "2m30.5s") and ISO 8601
    # durations ("PT1.5S", "P1DT2H").
    (re.compile(r"\d(?<!\w\d)\d*\s?(?:s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|wks?|weeks?|"
                r"mo|months?|y|yrs?|years?)\s+ago\b"), "<age>", re.compile("ago")),
    (re.compile(r"\d(?<!\w\d)\d*(?:h\d+m(?:\d+(?:\.\d+)?s)?|h\d+(?:\.\d+)?s|m\d+(?:\.\d+)?s)\b"), "<dur>",
     re.compile(r"[hm]\d")),
    (re.compile(r"P(?<!\wP)(?:\d+[YMWD])*T(?:\d+(?:\.\d+)?[HMS])+\b"), "<dur>", re.compile("T")),
    # Durations: "in 0.03s", "0.12 seconds", "(15 ms)", "took 1.2s". Counts without a unit stay.
    (re.compile(r"\d(?<!\w\d)\d*(?:\.\d+)?\s?(?:ms|msec|milliseconds?|s|secs?|seconds?|µs|us|ns)\b"), "<dur>", None),
)
#: A number after a key and a ``:`` or ``=``; a duration when the key names its time unit (``uptime_ms:
#: 7341234``, ``latencyMs=12``: :func:`~otelloop.mapping.noise.time_unit_key`), as a JSON number under
#: such a key is (``otelloop.mapping.canonical``). Only a key whose last letter ends a time unit's name
#: (``s``, ``c``, ``d``: ``ms``, ``usec``, ``millisecond``) can name one, so the number must follow one of
#: those letters (or it and a closing quote): numbers after other keys (``line=12``, ``size: 80``) are
#: not matches at all, instead of matches handed to :func:`_unit_keyed` to be put back as they were.
_KEYED_NUMBER = re.compile(r"([:=](?:(?<=[sScCdD][:=])|(?<=[sScCdD][\"'][:=]))[ \t]*)\d+(?:\.\d+)?(?![\w.])")
#: The key before a ``:`` or ``=``: a word of letters, digits, ``_``, ``-`` and ``.`` (and a closing quote).
_KEY_BEFORE = re.compile(r"[A-Za-z][\w.-]{0,62}[\"']?$")


def _unit_keyed(match: re.Match[str]) -> str:
    """``<dur>`` for the number after a key that names a time unit, else the match as it is."""
    start = match.start()
    key = _KEY_BEFORE.search(match.string, max(0, start - 64), start)
    if key is None or not noise.time_unit_key(key.group().rstrip("\"'")):
        return match.group()
    return match.group(1) + "<dur>"
#: Runs of 10 digits or more (after an id prefix's ``_`` too): epoch values near the span clock become
#: ``<clock>``, other runs of :data:`~otelloop.mapping.noise.MIN_ID_DIGITS` or more ``<id>``
#: (:func:`~otelloop.mapping.noise.digit_run`).
_DIGIT_RUN = re.compile(r"\d(?<![A-Za-z0-9.]\d)\d{9,}(?:\.\d+)?(?![A-Za-z0-9])")
#: Candidate identifier tokens of any alphabet (:func:`~otelloop.mapping.noise.token` decides). A slash
#: and a dot end a token, so paths and versions are never one.
_TOKEN = re.compile(r"[A-Za-z0-9_+=-]{12,}")

#: A "nothing found" answer in words. Searched only in short texts, and in an ASCII text only when its
#: lower-case form holds one of :data:`_BLANK_HINTS`: the search tries every branch at every position.
_BLANK_WORDS = re.compile(
    r"\b(?:no|0|zero)\s+(?:\w+\s+)?(?:results?|matches|match|hits?|documents?|docs|entries|items|records|"
    r"rows|files?|pages?|articles?|sources?|information|info|data)\b"
    r"|\bnothing\s+(?:\w+\s+)?(?:found|matched|matching|returned|relevant|useful)\b|\bnot\s+found\b"
    r"|\bfound\s+nothing\b|\b(?:could\s*n[o']t|can\s*n[o']t|cannot|unable\s+to|did\s*n[o']t|does\s*n[o']t)\s+find\b"
    r"|\b(?:does\s*n[o']t|did\s*n[o']t)\s+exist\b|\bno\s+such\b|\breturned\s+(?:no|nothing|0)\b|\bempty\s+result",
    re.IGNORECASE)
#: Substrings one of which every match of :data:`_BLANK_WORDS` holds in lower case (each branch names
#: one of them). Only ASCII texts are gated: there, ignoring case is comparing lower-case forms, which
#: is not so for every Unicode character (``ſ`` matches ``s`` when case is ignored).
_BLANK_HINTS = re.compile("result|match|hit|doc|entries|item|record|row|file|page|article|source|info|data|"
                          "nothing|found|find|exist|such|returned")  # "empty result" holds "result"
#: A whole answer that says nothing: ``none``, ``null``, ``N/A``, ``[]``, … (anchored: cheap).
_BLANK_ONLY = re.compile(r"^\W*(?:none|null|nil|n/?a|empty|no data|\[\]|\{\})\W*$", re.IGNORECASE)

_ACK_TEXT = re.compile(
    r"^\W*(?:ok|okay|done|success|succeeded|true|saved|created|updated|written|wrote|sent|deleted|removed|added|"
    r"stored|queued|accepted|submitted|applied|scheduled|recorded)\b|\bsuccessfully\b",
    re.IGNORECASE)

_DIGIT = re.compile(r"\d")


#: A failure summary, in three searches (a text is a failure report when one of them matches). Each
#: begins with a literal or a character class, with the word boundary checked after the first character
#: as in :data:`_VOLATILE`: the engine skips to where a match can begin, about five times faster than
#: one alternation whose branches begin with ``\b``.
_FAILURE_TEXTS = (
    # pytest / jest / mocha summaries, and other runners' words for a failing count ("2 tests failed",
    # "checks: 2 red", "1 broken link")
    re.compile(r"[1-9](?<!\w[1-9])\d*\s+(?:[\w-]+\s+)?(?:failed|failures?|errors?|failing|broken|red)\b"),
    # the same count written as a field, its label first ("Failures: 2" in Maven/Surefire's summary,
    # "Failed:     2" in ``dotnet test``'s, ``"failed": 2`` in a JSON report): a label, a separator, a count
    re.compile(r"[Ff](?<!\w[Ff])(?:ail(?:ed|ures?|ing)?|AIL(?:ED|URES?)?)[\"']?\s*[:=]\s*[1-9]"
               r"|[Ee](?<!\w[Ee])(?:rrors?|RRORS?)[\"']?\s*[:=]\s*[1-9]"),
    re.compile(
        r"A(?<!\wA)ssertionError\b"                                      # a failed assertion
        r"|F(?<!\wF)AILED\s*\((?:failures|errors)=[1-9]"                 # unittest
        r"|Traceback \(most recent call last\)"
        r"|e(?<!\we)x(?:it\s?(?:code|status)\s*[:=]?\s*[1-9]\d*\b|ited with (?:code|status) [1-9])"
        r"|r(?<!\wr)eturn\s?(?:code|status)\s*[:=]?\s*[1-9]\d*\b"
        r"|c(?<!\wc)ommand not found\b"),
    re.compile(r"^(?:FAIL|FAILED|ERROR)\b|^--- FAIL:", re.MULTILINE),     # go test, generic markers
)
#: Per search of :data:`_FAILURE_TEXTS` (which are case-sensitive), words one of which every match of it
#: holds: a text holding none of them skips that search.
_FAILURE_NEEDS = (
    ("fail", "error", "broken", "red"),
    ("ail", "AIL", "rror", "RROR"),
    ("AssertionError", "FAILED", "Traceback", "exit", "return", "command not found"),
    ("FAIL", "ERROR"),
)


def normalise_result(text: str, clock_s: float | None = None) -> str:
    """``text`` with its volatile parts replaced by placeholders (see the module docstring).

    ``clock_s``: the span's clock in seconds, near which a run of digits reads as a clock value
    (None: anywhere in this century; see :mod:`~otelloop.mapping.noise`).
    """
    if _DIGIT.search(text) is None and "/tmp" not in text:
        # only an id of letters alone can be here
        return text if len(text) < noise.MIN_ID_CHARS else _TOKEN.sub(noise.token, text)
    text = _normalise_short(text) if len(text) <= _SHORT_TEXT else _normalise(text)
    if _TEN_DIGITS.search(text) is None:
        return text
    return _DIGIT_RUN.sub(functools.partial(noise.digit_run, clock_s=clock_s), text)


#: Texts up to this long (the leaves of structured results: names, codes, states) have their
#: clock-independent normal form memoised: they repeat from result to result.
_SHORT_TEXT = 128
_TEN_DIGITS = re.compile(r"\d{10}")


def _normalise(text: str) -> str:
    """Every volatile part but runs of digits (which depend on the span clock) replaced."""
    for pattern, placeholder, gate in _VOLATILE:
        if gate is None or gate.search(text) is not None:
            text = pattern.sub(placeholder, text)
    if ":" in text or "=" in text:
        text = _KEYED_NUMBER.sub(_unit_keyed, text)
    return _TOKEN.sub(noise.token, text)


_normalise_short = functools.lru_cache(maxsize=4096)(_normalise)


def result_flags(text: str, empty: bool) -> int:
    """:data:`BLANK`, :data:`FAILED` and :data:`ACK` bits of a result's text (``empty``: blank by its
    structure)."""
    if empty:
        return BLANK
    stripped = text.strip()
    # A failure report is identified by its text even when it says "not found" somewhere (a checker's
    # "link target not found: x.md"): two different failures must not look alike as "nothing found".
    tail = stripped[-_FAILURE_TAIL_CHARS:]
    if _reports_failure(tail):
        return FAILED
    if len(stripped) <= _BLANK_MAX_CHARS and _says_nothing(stripped, stripped.lower()):  # short: tail is all
        return BLANK
    if len(stripped) <= _ACK_MAX_CHARS and _ACK_TEXT.search(stripped):
        return ACK
    return 0


def judged_flags(text: str, empty: bool) -> int:
    """:func:`result_flags` plus :data:`TERSE` for a short result that is no failure."""
    flags = result_flags(text, empty)
    if not flags & FAILED and (empty or len(text.strip()) <= _TERSE_MAX_CHARS):
        flags |= TERSE
    return flags


#: A placeholder of :func:`normalise_result` with what belongs to it (an id's prefix, an ETag's ``W/`` and
#: quotes, brackets).
_PLACEHOLDER = re.compile(r"(?:W/)?[\"'(\[]?(?:[A-Za-z]{1,16}[_-])?<(?:uuid|date|time|tmp|addr|hex|dur|age|clock|id)>"
                          r"[\"')\]]?")
#: What is left of a line once its placeholders are out, when it was only noise: at most three words naming
#: the value (``request_id:``, ``generated at``, ``message id``, ``took``), no number standing alone.
_LABEL_ONLY = re.compile(r"^[^\w]*(?:[A-Za-z][\w.-]*[^\w\n]*){0,3}$")


def without_noise_lines(masked: str) -> str:
    """A normalised text without its lines that are only noise: a placeholder with at most a three-word
    label (``request_id: req_<id>``, ``timestamp_ms=<clock>``, ``generated at <date>``). What a result
    says is judged without them: ``[]`` followed by a serving time is still an empty answer."""
    if "<" not in masked:
        return masked
    kept = [line for line in masked.split("\n")
            if "<" not in line or _LABEL_ONLY.match(_PLACEHOLDER.sub(" ", line)) is None]
    return "\n".join(kept)


def blank_but_noise(raw: str, masked: str) -> bool:
    """Whether a short text result says nothing once its noise lines are out (see
    :func:`without_noise_lines`): nothing left, or a bare empty answer (``[]``, ``null``, ``none``)."""
    if masked is raw or len(raw) > _BLANK_MAX_CHARS or masked == raw:
        return False
    rest = without_noise_lines(masked).strip()
    return not rest or _BLANK_ONLY.search(rest) is not None


def _reports_failure(text: str) -> bool:
    """Whether one of :data:`_FAILURE_TEXTS` is found in ``text``, each search made only when ``text``
    holds one of the words every match of it holds (:data:`_FAILURE_NEEDS`): a substring test costs a
    fraction of a search, and most results are no failure report."""
    return any(any(word in text for word in needs) and pattern.search(text) is not None
               for pattern, needs in zip(_FAILURE_TEXTS, _FAILURE_NEEDS, strict=True))


def _says_nothing(text: str, lowered: str) -> bool:
    """Whether a short result's words say it found nothing (see :data:`_BLANK_WORDS`); ``lowered`` is
    ``text.lower()``."""
    if _BLANK_ONLY.search(text) is not None:
        return True
    if text.isascii() and _BLANK_HINTS.search(lowered) is None:
        return False
    return _BLANK_WORDS.search(text) is not None


#: HTTP status codes that a retry may cure (RFC 9110 §15: 408 Request Timeout, 425 Too Early, 429 Too Many
#: Requests, 500 Internal Server Error, 502 Bad Gateway, 503 Service Unavailable, 504 Gateway Timeout).
TRANSIENT_HTTP = frozenset({"408", "425", "429", "500", "502", "503", "504"})
#: gRPC status codes a retry may cure, by number and name (grpc/doc/statuscodes.md: DEADLINE_EXCEEDED 4,
#: RESOURCE_EXHAUSTED 8, UNAVAILABLE 14).
TRANSIENT_GRPC = frozenset({"4", "8", "14", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE"})
_CODES = "408|425|429|500|502|503|504"
#: A transient HTTP status code in an error's text, where it reads as a status and not as a count: next
#: to a reason phrase in any language (the next word starts with a capital or a non-Latin letter: ``429
#: Too Many Requests``, ``429 Zu viele Anfragen``, ``429 リクエストが多すぎます``), after ``HTTP`` (``HTTP/1.1
#: 503``, ``HTTP 503``), or as the value of a JSON ``status``/``status_code``/``code`` field.
_STATUS_IN_TEXT = re.compile(
    rf"(?<![\w.])(?:{_CODES})(?![\w.])[:,]?\s*(?=[A-Z]|[^\W\da-zA-Z_])"
    rf"|HTTP(?:/[\d.]+)?\s+(?:{_CODES})(?!\d)"
    rf"|[\"'](?:status|status_?code|statusCode|code)[\"']\s*:\s*[\"']?(?:{_CODES})(?![\w.])")
#: Exception class names of timeouts and rate limits in the languages agents' tools are written in
#: (Python ``TimeoutError``, Java ``SocketTimeoutException``, .NET ``TimeoutException``, Go
#: ``DeadlineExceeded``, SDKs' ``RateLimitError``): a hint, never required.
_TRANSIENT_CLASS = re.compile(r"Time(?:d)?[Oo]ut|DeadlineExceeded|RateLimit|Throttl")


def transient_failure(text: str, error_type: str | None = None, exception_type: str | None = None,
                      http_status: str | None = None, grpc_status: str | None = None) -> bool:
    """Whether a failed step failed transiently: a retry of the same call may succeed.

    Decided from the status first: an HTTP status code (the span's ``http.response.status_code``, or
    ``error.type`` holding one, as OTel semantic conventions record it), a gRPC status code
    (``rpc.grpc.status_code``, or ``error.type`` holding its name); then from a status code written in the
    error's text (see :data:`_STATUS_IN_TEXT`); and, as a hint, from the class name of the error type or
    exception (a timeout or rate-limit class). Other client errors (400, 404, …) stay ordinary failures.
    """
    if http_status is not None:
        return http_status in TRANSIENT_HTTP
    if grpc_status is not None:
        return grpc_status in TRANSIENT_GRPC
    for name in (error_type, exception_type):
        if name and (name in TRANSIENT_HTTP or name in TRANSIENT_GRPC or _TRANSIENT_CLASS.search(name)):
            return True
    return _STATUS_IN_TEXT.search(text[-_FAILURE_TAIL_CHARS:]) is not None
