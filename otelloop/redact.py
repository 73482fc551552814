"""Masking of secret-looking values in text otelloop keeps or shows: finding messages, evidence, verdicts.

Detectors quote what agents did (a failing command, a tool call, a file path) so that a person can see
why a session was flagged. Agents put secrets in those places: ``curl -H "Authorization: Bearer …"``,
``psql postgres://app:hunter2@db``, ``export OPENAI_API_KEY=sk-…``. Everything otelloop remembers about a
session or sends to the sessions API, the event stream, the console and its own logs goes through
:func:`redact` first, so no such value is kept or served. The rules favour masking too much over too
little: a masked harmless value costs a moment of reading, a leaked token costs a rotation.

What is masked (each replaced by ``***``, the surrounding text kept):

- the credentials of an ``Authorization`` header value (``Bearer``, ``Basic``, ``Token`` … schemes);
- the value after a secret-looking name: ``key``, ``token``, ``password``/``passwd``/``pwd``, ``secret``,
  ``credential``, ``auth`` (also as part of a longer name: ``OPENAI_API_KEY=``, ``access_token:``,
  ``"client_secret": "…"``, ``--password …``);
- the password of a URL's user info (``scheme://user:***@host``);
- well-known token shapes (OpenAI/Anthropic ``sk-…``, GitHub ``ghp_…``, Slack ``xox…-``, AWS ``AKIA…``,
  JSON Web Tokens, PEM private keys);
- long high-entropy strings: 20 or more characters of a base64/hex alphabet that mix letters and digits
  with enough entropy, or 32 or more hex digits (file paths, words and hyphenated names are kept).

The result is one line (control characters become spaces) of at most ``limit`` characters.
"""

from __future__ import annotations

import functools
import math
import re

#: Default bound of a redacted text, in characters.
MAX_CHARS = 300
#: Text beyond this many characters is not even looked at (the result is cut well before it).
_SCAN_CHARS = 4096
MASK = "***"

_SECRET_NAME = r"[A-Za-z0-9_.\-]*(?:key|token|passw(?:or)?d|pwd|secret|credential|auth)[A-Za-z0-9_.\-]*"

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM blocks first: their body would otherwise be cut into pieces by the other rules.
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.S),
     "-----BEGIN PRIVATE KEY-----" + MASK),
    # Authorization: <scheme> <credentials>  /  Bearer <token> anywhere
    (re.compile(r"(?i)\b(bearer|basic|digest)(\s+)[A-Za-z0-9._~+/=\-]{4,}"), r"\1\2" + MASK),
    (re.compile(r"(?i)\b(token|apikey)(\s+)(?=[A-Za-z0-9._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{8,}"),
     r"\1\2" + MASK),
    (re.compile(r"(?i)\b(authorization|x-api-key|api-key|cookie)(\s*[:=]\s*)(?!bearer\b|basic\b|token\b)"
                r"[^\s\"',;]+"), r"\1\2" + MASK),
    # scheme://user:password@host
    (re.compile(r"([a-z][a-z0-9+.\-]*://[^\s:/@]+:)[^\s@/]+@", re.I), r"\1" + MASK + "@"),
    # name=value, name: value, "name": "value", --name value
    (re.compile(r"(?i)([\"']?)(" + _SECRET_NAME + r")\1(\s*[:=]\s*)(?!(?:bearer|basic|digest|token)\s|\*\*\*)"
                r"(\"[^\"]*\"|'[^']*'|[^\s&,;\"')}\]]+)"),
     r"\1\2\1\3" + MASK),
    (re.compile(r"(?i)(--?" + _SECRET_NAME + r")(\s+)(?!-)[^\s&,;\"')]+"), r"\1\2" + MASK),
    # well-known token shapes
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"), MASK),
)
_CANDIDATE = re.compile(r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+/=_\-]{20,}(?![A-Za-z0-9+/=_\-])")
_SEPARATORS = re.compile(r"[-_.]")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _entropy(text: str) -> float:
    """Shannon entropy of the characters of ``text``, in bits per character."""
    n = len(text)
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_random(token: str) -> bool:
    """Whether a run of base64/hex characters looks like a generated secret rather than a word or path."""
    if _HEX.fullmatch(token):
        return True
    if "/" in token and all(len(part) < 20 for part in token.split("/")):
        return False  # a path: its segments are judged on their own when long
    parts = _SEPARATORS.split(token)
    if len(parts) >= 3 and 2 * sum(part.isalpha() for part in parts) >= len(parts):
        return False  # a hyphenated or snake_case name (python3-site-packages-2024)
    digits = sum(ch.isdigit() for ch in token)
    letters = sum(ch.isalpha() for ch in token)
    if not digits or not letters:
        return False  # words, hyphenated names, numbers
    upper = sum(ch.isupper() for ch in token)
    mixed_case = 0 < upper < letters
    if digits / len(token) < 0.1 and not mixed_case:
        return False  # a name with a version or a year in it
    return _entropy(token) >= (3.0 if mixed_case else 3.3)


def _mask_random(match: re.Match[str]) -> str:
    token = match.group(0)
    if looks_random(token):
        return MASK
    if "/" in token:  # a path with a long segment: judge each segment
        return "/".join(MASK if len(p) >= 20 and looks_random(p) else p for p in token.split("/"))
    return token


#: Every match of a rule of :data:`_RULES` contains one of these (compared in lower case) or one of
#: :data:`_RULE_MARKS` (case as written); a text with none of them skips the rules. Detector messages
#: change on every step of a loop (counts grow), so they are redacted often, and most hold no secret.
_RULE_WORDS = ("key", "token", "passw", "pwd", "secret", "credential", "auth", "bearer", "basic", "digest",
               "cookie", "://", "sk-", "pk-", "rk-")
_RULE_MARKS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "xox", "AKIA", "ASIA", "eyJ")


def _might_match_a_rule(text: str) -> bool:
    lowered = text.lower()
    for word in _RULE_WORDS:  # plain loops: twice as fast as any() over generators here
        if word in lowered:
            return True
    for mark in _RULE_MARKS:  # noqa: SIM110
        if mark in text:
            return True
    return False


def _apply_rules(text: str) -> str:
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


@functools.lru_cache(maxsize=512)
def _redacted(text: str, limit: int) -> str:
    out = text[:_SCAN_CHARS]
    if not out.isprintable():  # every control character is unprintable; most texts have none
        out = _CONTROL.sub(" ", out)
    if _might_match_a_rule(out):
        out = _apply_rules(out)
    out = _CANDIDATE.sub(_mask_random, out)
    if len(out) > limit:
        out = out[:limit - 1] + "…"
    return out


def redact(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` with secret-looking values masked, on one line, cut to ``limit`` characters.

    Results are memoised (512 entries, inputs read up to 4096 characters): detectors repeat the same
    message on every step of a loop, and the loop is exactly when it is asked for.
    """
    if not text:
        return ""
    if len(text) > _SCAN_CHARS:
        text = text[:_SCAN_CHARS]
    return _redacted(text, limit)
