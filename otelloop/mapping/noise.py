"""Per-call noise recognised by its shape: identifiers of any alphabet and clock values.

A tool's result often carries parts that change on every call and say nothing about the work: a
request id (``req_8fK2pQzL9xWm3NcV``), a serving time in epoch milliseconds, an ETag, a page cursor.
Left in, they make every repetition of a stuck call look new. Word lists of field names do not travel
(every API names them differently, in every language), so this module decides by what a value *is*:

- an **identifier** is a token of letters and digits (any alphabet: hex, base32, base58, base62,
  base64 with ``+/=``, base64url with ``-_``) long enough to be random (:data:`MIN_ID_CHARS`) whose
  characters switch between classes (digit, upper case, lower case) as often as random text does and
  far more often than words, CamelCase names or version strings do (:func:`id_shaped`); a short
  alphabetic prefix such as ``req_`` or ``chatcmpl-`` is kept, since it says what the id is;
- a **clock value** is a run of 10, 13, 16 or 19 digits that read as epoch seconds, milliseconds,
  microseconds or nanoseconds falls within :data:`CLOCK_WINDOW_S` of the span's own clock
  (:func:`clock_shaped`); other runs of 15 digits or more are ids (snowflake-style);
- text forms of clock values (RFC 3339 with fractions and zones, HTTP dates, relative ages such as
  ``3 minutes ago``, compact and ISO 8601 durations) are patterns in :mod:`otelloop.mapping.results`.

- a **duration** is a number with a time unit: in a text (``took 123 ms``, ``elapsed: 2.3s``, patterns in
  :mod:`otelloop.mapping.results`), or named by the unit its key ends in — a JSON number under
  ``took_ms``, ``latencyMs``, ``elapsed_seconds``, or a text's ``uptime_ms: 7341234``
  (:func:`time_unit_key`). A duration is measured per call: it says how long the call took (or how long
  a server has run), never what the call found;

By behaviour, per tool (:class:`ClockTable`): a number whose change between two results matches the time
between their spans in some unit (a server's uptime without a unit in its key), that goes up and
down between repeats of one call while all else stays the same (a per-call duration), or that moves
by exactly one per call, the same way every time (a count of calls: a quota's ``remaining`` falling by
one per request, a build or sequence number rising by one per run).

What is never noise by shape: words (no digits, or few class switches), numbers below 10 digits (counts,
amounts, percentages), dotted versions (``1.2.3``: a dot ends a token), file paths (a slash ends a token,
and path segments are words).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Set as AbstractSet

#: Shortest token (after its alphabetic prefix) that can be a random identifier: 12 random characters of
#: base 16 already hold 48 bits; shorter mixed tokens (``x86_64``, ``utf8mb4``, ``sha256``) are names.
MIN_ID_CHARS = 12
#: Fraction of neighbouring characters in different classes (digit, upper, lower) from which a token is
#: random: random hex switches about 47 % of the time, base32 about 43 %, base62 about 62 %; words,
#: CamelCase names and ``x86_64-linux-gnu`` stay under 30 %.
MIN_SWITCH_RATE = 0.3
#: Switch rate from which a token with at most one run of digits is random: base62 and base58 letters
#: switch case about half of the time.
MIN_CASE_SWITCH_RATE = 0.45
#: Share of vowels among a token's letters under which they are not words (random Latin letters hold
#: about 19 % vowels, English and German words 35 to 40 %).
MAX_VOWEL_SHARE = 0.25
#: A run of digits is a clock value when, read in a unit of its length, it is this close to the span's
#: clock (a server's time differs from the agent's by its latency and its clock skew, never by a year).
CLOCK_WINDOW_S = 400 * 86400
#: Without a span clock, the plausible range of an epoch in seconds (2001-09-09 to 2099-12-31).
_EPOCH_RANGE_S = (1_000_000_000, 4_102_444_800)
#: Digits → the unit (per second) of an epoch value of that many digits.
_CLOCK_UNITS = {10: 1, 13: 1_000, 16: 1_000_000, 19: 1_000_000_000}
#: A run of this many digits or more that is not a clock value is an identifier (snowflake-style ids are
#: 17 to 19 digits; 12-digit account numbers and 13-digit ISBNs are stable and stay).
MIN_ID_DIGITS = 15
#: A short alphabetic prefix naming what a token is (``req_``, ``chatcmpl-``, ``sk-``, ``evt_``).
_PREFIX = re.compile(r"[A-Za-z]{1,16}[_-]")
#: A prefix kept before ``<id>``: lower-case letters naming the kind of id (``req_``, ``chatcmpl-``).
_NAMING_PREFIX = re.compile(r"[a-z]{2,16}[_-]$")
_HEX = re.compile(r"(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*[0-9])(?:[0-9a-f]+|[0-9A-F]+)$")
_CAPITAL_OR_DIGIT = re.compile(r"[A-Z0-9]")
#: Upper case, lower case and digits, all three, in a token body of letters and digits only.
_MIXED = re.compile(r"(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]+$")


def id_shaped(token: str) -> bool:
    """Whether a token of ``[A-Za-z0-9+/=_-]`` is a random identifier (see the module docstring)."""
    prefix = _PREFIX.match(token)
    body = token[prefix.end():] if prefix is not None else token
    return _id_body(body, prefix is not None)


def _id_body(body: str, prefixed: bool) -> bool:
    """Whether a token's body (after its prefix, if ``prefixed``) is random.

    A prefixed body of 16 characters or more that mixes upper case, lower case and digits is an id
    whatever its switch rate: that is how prefixed ids are made (``req_``, ``cus_``, ``evt_`` + base62),
    and no word is.
    """
    if len(body) < MIN_ID_CHARS:
        return False
    if prefixed and len(body) >= 16 and _MIXED.match(body) is not None:
        return True
    if _HEX.match(body) is not None:  # hex mixing letters and digits (a prefixed sha, an object id)
        return True
    return _random_like(body, prefixed)


def _random_like(body: str, prefixed: bool = False) -> bool:
    """Whether the alphanumeric characters of ``body`` look random rather than like words.

    Three signs, each rare in words and names of any Latin-script language: characters switching class
    (digit, upper, lower) at nearly every step; digits spread in several runs among letters that switch
    often; few vowels among the letters (random letters are about one fifth vowels, words twice that).
    """
    switches = digits = alnum = digit_runs = vowels = 0
    last = ""
    for ch in body:
        if "0" <= ch <= "9":
            cls = "d"
            digits += 1
            if last != "d":
                digit_runs += 1
        elif "a" <= ch <= "z":
            cls = "l"
            vowels += ch in "aeiou"
        elif "A" <= ch <= "Z":
            cls = "u"
            vowels += ch in "AEIOU"
        else:  # separators and padding neither count nor break a run
            continue
        alnum += 1
        if last and cls != last:
            switches += 1
        last = cls
    if alnum < MIN_ID_CHARS or digits == alnum:
        return False  # too short, or digits only (judged as a number by clock_shaped)
    rate = switches / (alnum - 1)
    vowel_share = vowels / (alnum - digits)
    if prefixed and rate >= MIN_SWITCH_RATE and not body.isupper() and not body.islower() and alnum >= 16:
        return True  # a prefixed body whose cases switch at nearly every third letter
    if rate >= MIN_CASE_SWITCH_RATE and (digits or vowel_share < MAX_VOWEL_SHARE + 0.05):
        return True  # (CamelCase of short words, ``CrashLoopBackOff``, switches often but has vowels)
    if digit_runs >= 2:
        return rate >= MIN_SWITCH_RATE or vowel_share < MAX_VOWEL_SHARE
    if (vowel_share < MAX_VOWEL_SHARE - 0.05 and alnum - digits >= MIN_ID_CHARS and alnum >= 16
            and not body.islower() and len(set(body)) * 2 >= alnum):
        return True  # 16 varied capitals or more with hardly a vowel: base32 with few digits, not a word
    return rate >= MIN_SWITCH_RATE and vowel_share < MAX_VOWEL_SHARE - 0.05 and alnum >= 16


def clock_shaped(digits: str, clock_s: float | None) -> bool:
    """Whether a run of digits (with an optional fraction after 10 digits: ``1764121234.567``) is an
    epoch value near ``clock_s`` (the span's start, seconds; None: a plausible epoch at all)."""
    whole, _, _ = digits.partition(".")
    unit = _CLOCK_UNITS.get(len(whole))
    if unit is None or (unit != 1 and whole != digits):
        return False
    seconds = int(whole) / unit
    if clock_s is None or clock_s <= 0:
        return _EPOCH_RANGE_S[0] <= seconds <= _EPOCH_RANGE_S[1]
    return abs(seconds - clock_s) <= CLOCK_WINDOW_S


def number_noise(value: int | float, clock_s: float | None) -> str | None:
    """The placeholder of a JSON number that is a clock value or a long numeric id, else None."""
    if isinstance(value, bool) or not value or value < 1_000_000_000:
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return "<clock>" if clock_shaped(repr(value), clock_s) else None
        value = int(value)
    text = str(value)
    if clock_shaped(text, clock_s):
        return "<clock>"
    return "<id>" if len(text) >= MIN_ID_DIGITS else None


def digit_run(match: re.Match[str], clock_s: float | None) -> str:
    """A regex callback for runs of 10 digits or more: ``<clock>``, ``<id>`` or the run itself."""
    run = match.group()
    if clock_shaped(run, clock_s):
        return "<clock>"
    return "<id>" if "." not in run and len(run) >= MIN_ID_DIGITS else run


def token(match: re.Match[str]) -> str:
    """A regex callback for candidate identifier tokens: masked (its prefix kept) when id-shaped."""
    tok = match.group()
    if _CAPITAL_OR_DIGIT.search(tok) is None:
        return tok  # lower-case letters alone are never an id (see _id_body): prose, code names
    prefix = _PREFIX.match(tok)
    body = tok[prefix.end():] if prefix is not None else tok
    if not _id_body(body, prefix is not None):
        return tok
    if prefix is None or _NAMING_PREFIX.match(prefix.group()) is None or "-" in body or "_" in body:
        return "<id>"  # a random first segment (base64url) or a name of many segments: all of it
    return prefix.group() + "<id>"


#: The last word of a key that names a time unit below a minute (``_ms``, ``Ms``, ``_seconds``, ``_us``,
#: ``_nanos``): minutes and hours are left out, since ``min`` and ``h`` name other things as often.
TIME_UNITS = frozenset({"s", "sec", "secs", "second", "seconds", "ms", "msec", "msecs", "millis", "millisecond",
                        "milliseconds", "us", "usec", "usecs", "micros", "microsecond", "microseconds", "ns",
                        "nsec", "nanos", "nanosecond", "nanoseconds"})
#: The words of a key: runs of lower case (with a leading capital: camelCase), of capitals, of digits.
_KEY_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def time_unit_key(key: str) -> bool:
    """Whether a key names a time unit by its last word (``took_ms``, ``latencyMs``, ``elapsed_seconds``,
    ``uptime-s``): a number under it is a duration or a clock reading, per call (see the module
    docstring). A key of one word (``s``, ``ms``, ``seconds``) does not say what it measures."""
    return 4 <= len(key) <= 64 and _ends_in_time_unit(key)


@functools.lru_cache(maxsize=1024)
def _ends_in_time_unit(key: str) -> bool:
    """:func:`time_unit_key` for a key of at most 64 characters, memoised: a tool's keys repeat."""
    words = _KEY_WORDS.findall(key)
    return len(words) >= 2 and words[-1].lower() in TIME_UNITS


# -- counters that track the span clock (learned per tool) ------------------------------------------------------

#: Units a counter may count the clock in, in nanoseconds per unit: seconds, milliseconds, microseconds,
#: nanoseconds (a server's uptime, a monotonic clock, a sequence stamped with time).
CLOCK_UNITS_NS = (1_000_000_000, 1_000_000, 1_000, 1)
#: A change is compared with the clock only when the time between the two spans is this many units at
#: least: a counter rising by 2 in 2 s says nothing about seconds (every count rises by small steps).
MIN_CLOCK_TICKS = 20
#: How far a clock-tracking change may be from the time between the spans: the server reads its clock
#: a latency after the span starts, and latencies differ by tens of milliseconds (5 % and 100 ms).
CLOCK_TOLERANCE = 0.05
CLOCK_SLACK_NS = 100_000_000
#: Candidate counters compared per result (a result with more numbers is a table: none is compared).
MAX_NUMBERS = 4
#: Recent tools (per session) whose last numbers are remembered, and keys learned per tool (as clocks,
#: as jitter, as counts).
MAX_CLOCK_TOOLS = 4
MAX_CLOCKS = 4
#: A number counts calls once it has moved by exactly one call's worth (see :func:`counts_calls`) this
#: many times in a row, the same way: once can be chance (a count that happened to grow by one), twice in
#: a row with nothing else changing it is a counter of requests.
CALL_COUNT_AFTER = 2


def counts_calls(change: int, calls: int) -> int:
    """The direction (1 up, -1 down) of a change that counts calls, else 0: a change of exactly one, or of
    ``calls`` (the results of tools with counters since this tool's last one: a quota several tools
    draw on falls by the requests they all made)."""
    if change == 1 or change == calls:
        return 1
    if change == -1 or change == -calls:
        return -1
    return 0


def tracks_clock(change: int, elapsed_ns: int) -> bool:
    """Whether a counter's ``change`` between two results matches ``elapsed_ns`` between their spans in
    one of :data:`CLOCK_UNITS_NS` (within :data:`CLOCK_TOLERANCE` and :data:`CLOCK_SLACK_NS`)."""
    if change <= 0 or elapsed_ns <= 0:
        return False
    for unit in CLOCK_UNITS_NS:
        expected = elapsed_ns / unit
        if expected >= MIN_CLOCK_TICKS and abs(change - expected) <= expected * CLOCK_TOLERANCE + CLOCK_SLACK_NS / unit:
            return True
    return False


class ToolClock:
    """What one tool's last result held: its call, span start, candidate counters (``key, value, …``),
    the hash of the result without them and the hash it was judged by; and what its counters were
    learned to be in this session (see :meth:`ClockTable.observe`)."""

    __slots__ = ("tool", "call", "start_ns", "seq", "numbers", "free", "output", "clocks", "counts", "jitter",
                 "signs", "ticks")

    def __init__(self, tool: int) -> None:
        self.tool = tool
        self.call = 0
        self.start_ns = 0
        self.seq = 0  # the table's count of observed results when this one was
        self.numbers: tuple[int, ...] = ()
        self.free = 0
        self.output = 0
        self.clocks: list[int] = []  # keys whose changes track the span clock
        self.counts: list[int] = []  # keys seen changing otherwise than the clock: never clocks again
        self.jitter: list[int] = []  # keys that went up and down between repeats of one call, all else alike
        self.signs: dict[int, int] = {}  # the direction of each key's last such change
        self.ticks: dict[int, int] = {}  # keys moving by one call's worth: signed count of such moves in a row


def _bounded_add(keys: list[int], key: int) -> bool:
    """Add ``key`` to a list of at most :data:`MAX_CLOCKS` keys (the oldest gives way); False if present."""
    if key in keys:
        return False
    if len(keys) >= MAX_CLOCKS:
        del keys[0]
    keys.append(key)
    return True


#: The keys learned when none is: shared, never modified (callers only test membership and emptiness).
_NOTHING: frozenset[int] = frozenset()


class ClockTable:
    """Per session, per recent tool (at most :data:`MAX_CLOCK_TOOLS`): the numbers of its results that are
    per-call noise without saying so by their shape, learned online (see :meth:`observe`)."""

    __slots__ = ("tools", "seq")

    def __init__(self) -> None:
        self.tools: list[ToolClock] = []
        self.seq = 0  # results observed in the session (of tools with candidate counters)

    def observe(self, tool: int, call: int, start_ns: int, numbers: tuple[int, ...], free: int,
                output: int) -> tuple[AbstractSet[int], ToolClock | None]:
        """Record a tool's result; the keys of its numbers that are noise, and the tool's previous result
        when a key was learned just now (so that it can be judged again, masked the same way).

        Two behaviours make a number noise, each compared with the tool's last result under the same key:

        - a **clock**: its value changed by the time between this span and the last one, in one unit
          (:func:`tracks_clock`); forgotten when it later changes otherwise (a progress count that once
          matched by chance), and a key seen changing otherwise is never a clock again;
        - **jitter**: between results of the same call whose other parts stayed the same, its value went
          up and then down (or down, then up), as a duration measured per call does; a value moving toward
          completion moves one way;
        - a **count of calls**: its value moved by exactly one call's worth (:func:`counts_calls`), the
          same way, :data:`CALL_COUNT_AFTER` times in a row; a key that then stays or moves otherwise is
          a count of calls no more (learned again only from scratch). A count of work done between two
          polls (rows processed, items fetched) moves by what the work did, not by one per request.
        """
        for at, entry in enumerate(self.tools):  # a plain loop: a generator costs more, over four tools
            if entry.tool == tool:
                del self.tools[at]
                break
        else:
            entry = ToolClock(tool)
            if len(self.tools) >= MAX_CLOCK_TOOLS:
                del self.tools[0]
        old_numbers = entry.numbers
        pairs = iter(old_numbers)  # key, value, key, value, …
        previous = dict(zip(pairs, pairs, strict=True)) if old_numbers else {}
        elapsed = start_ns - entry.start_ns
        alike = call == entry.call and free == entry.free
        self.seq += 1
        calls = self.seq - entry.seq if entry.seq else 1
        signs: dict[int, int] = {}
        ticks: dict[int, int] = {}
        fresh = False
        for i in range(0, len(numbers) if previous else 0, 2):  # a tool's first result: nothing to compare
            key, value = numbers[i], numbers[i + 1]
            old = previous.get(key)
            if old is None:
                continue
            sign = counts_calls(value - old, calls)
            if sign:  # a move by one call's worth (most numbers move otherwise, or stay)
                fresh |= self._tick(entry, ticks, key, sign)
            if old == value:
                continue
            if key not in entry.counts:  # a key kept as changing otherwise is no clock: nothing to check
                if tracks_clock(value - old, elapsed):
                    fresh |= _bounded_add(entry.clocks, key)
                else:
                    if key in entry.clocks:
                        entry.clocks.remove(key)
                    _bounded_add(entry.counts, key)
            if alike:
                sign = signs[key] = 1 if value > old else -1
                if entry.signs.get(key, sign) != sign:
                    fresh |= _bounded_add(entry.jitter, key)
        entry.signs = signs
        entry.ticks = ticks
        before = None
        if fresh and entry.numbers:
            before = ToolClock(tool)
            before.call, before.start_ns, before.numbers, before.free, before.output = (
                entry.call, entry.start_ns, entry.numbers, entry.free, entry.output)
        entry.call, entry.start_ns, entry.numbers, entry.free, entry.output = call, start_ns, numbers, free, output
        entry.seq = self.seq
        self.tools.append(entry)
        if not (entry.clocks or entry.jitter or (ticks and any(map(_counting, ticks.values())))):
            return _NOTHING, before  # most tools' numbers: nothing learned
        return {k for k in numbers[::2] if k in entry.clocks or k in entry.jitter or _counting(ticks.get(k, 0))}, before

    @staticmethod
    def _tick(entry: ToolClock, ticks: dict[int, int], key: int, sign: int) -> bool:
        """Count one more move of ``key`` by one call's worth in direction ``sign`` (1 or -1) into ``ticks``;
        True when the key has just become a count of calls. A key that moved otherwise, or stayed, is not
        passed here: ``ticks`` is made anew for every result, so its row ends."""
        before = entry.ticks.get(key, 0)
        row = before + sign if before * sign > 0 else sign
        if len(ticks) < MAX_CLOCKS:
            ticks[key] = row
        return _counting(row) and not _counting(before)


def _counting(row: int) -> bool:
    """Whether a row of moves by one call's worth (signed, see :meth:`ClockTable._tick`) makes a count of
    calls."""
    return abs(row) >= CALL_COUNT_AFTER


def without_clocks(free: int, numbers: tuple[int, ...], clocks: AbstractSet[int]) -> tuple[int, ...]:
    """What identifies a result with its clock values left out: the hash of the result without its
    candidate counters, then the counters that are not clocks (key, value, …)."""
    kept = [n for i in range(0, len(numbers), 2) if numbers[i] not in clocks for n in numbers[i:i + 2]]
    return (free, *kept)
