"""Masking of secret-looking values in text otelloop keeps or shows: finding messages, evidence, verdicts.

Detectors quote what agents did (a failing command, a tool call, a file path) so that a person can see
why a session was flagged. Agents put secrets in those places: ``curl -u admin:hunter2``,
``psql postgres://app:hunter2@db``, ``export OPENAI_API_KEY=sk-…``, a JSON body with ``\\"password\\"``.
Everything otelloop remembers about a session or sends to the sessions API, the event stream, the console
and its own logs goes through :func:`redact` first, so no such value is kept or served. The rules favour
masking too much over too little: a masked harmless value costs a moment of reading, a leaked token costs
a rotation.

How a text is read:

1. It is put on one line: control characters and line separators become spaces, invisible format
   characters (zero-width spaces and joiners, soft hyphens, bidirectional controls) are removed.
2. A *normalised view* is made for matching only: backslash escapes (``\\"``, ``\\\\``, ``\\u003d``,
   ``\\n``), percent-encoding (``%3D``, ``%253D``), HTML character references (``&quot;``) are decoded,
   up to four levels deep, and look-alike characters are folded (NFKC: full-width ``＝`` is ``=``,
   ``ＰＡＳＳ`` is ``PASS``). Each character of the view knows which characters of the text it came from.
3. The rules below find secrets in the view; each finding masks the characters of the *text* it came
   from, so the output keeps the text's own spelling and structure (``password%3D***``,
   ``{\\"password\\": ***}``, ``password＝***``) and loses only the secret.
4. Masking is repeated until nothing changes (at most three rounds), which makes :func:`redact`
   idempotent: redacting a redacted text returns it unchanged.

What is masked (each replaced by ``***``, the surrounding text kept):

- the credentials of an ``Authorization``/``Proxy-Authorization`` header, ``Bearer``/``Basic``
  credentials anywhere, ``Cookie``/``Set-Cookie`` values;
- the value after a secret-looking name, in ``name=value``, ``name: value``, ``"name": "value"``,
  ``--name value``, ``-name value`` forms: names containing ``key``, ``token``, ``secret``,
  ``credential``, ``password``/``passwd``/``pwd``, ``pass``/``passphrase``/``passcode`` or ``pw`` as a word
  (``PASS=``, ``DB_PW=``, ``-storepass``), ``auth`` as a word (``author=`` is not a secret);
  a ``key``/``token`` name whose value is a plain number (``max_tokens=1024``) is a count, not a secret;
- the password options of the command-line tools that take one: ``curl -u user:***``, ``mysql -p***``,
  ``sshpass -p``, ``docker login -p``, ``redis-cli -a``, ``sqlcmd -P``, ``mongosh -p``, ``az login -p``,
  ``ldapsearch -w``, ``smbclient -U user%***``, ``zip -P``, ``7z -p``, ``htpasswd -b``, ``cqlsh -p``,
  ``lftp -u user,***``, ``sqlplus user/***``, ``ssh-keygen -N/-P``, ``openssl -k``, ``twine -p``,
  ``mosquitto_pub -P``, ``rabbitmqctl add_user``, ``vault login``; ``.netrc`` lines; ``auth=(user, ***)``;
- URL credentials: ``scheme://user:***@host`` (also with an empty user or an ``@`` in the password),
  a token used as the user (``https://***@github.com``), signature parameters (``sig=``, ``signature=``,
  ``X-Amz-Signature=``);
- well-known token shapes, by their documented prefixes: GitHub (``ghp_``, ``github_pat_`` …), GitLab
  (``glpat-`` …), Slack (``xoxb-`` …), Stripe (``sk_live_``, ``rk_live_``, ``whsec_``), OpenAI/Anthropic
  (``sk-``), AWS access key ids, Google (``AIza``, ``GOCSPX-``, ``ya29.``), npm, PyPI, Hugging Face,
  SendGrid, DigitalOcean, Shopify, Vault (``hvs.``), JSON Web Tokens, PEM and PGP private key blocks;
- long high-entropy strings: 20 or more characters of a base64/hex alphabet that mix letters and digits
  with enough entropy (an AWS secret key with ``/`` in it too), or 32 or more hex digits.

What stays readable: file paths and URLs (a slash-separated run with a word in it is a path; only its
long random segments are judged), words and hyphenated or snake_case names, UUIDs, W3C ``traceparent``
values, hex digests after ``git``/``commit``/``sha256``/``trace``/``span`` (commit ids, image digests,
trace ids), port options (``ssh -p 2222``), counts.

Why no library: the Python secret scanners were measured on the test table of 103 credential forms and
34 plain texts (``tests/credential_forms.py``, ``benchmarks/bench_redact.py --compare``): Yelp's
``detect-secrets`` 1.5 found 23 forms (its Bridgecrew fork 30) at 1.6 ms a call (its line scan, more
through a file); Microsoft's ``secret-masker`` 1.0.0b4 found 7 at 0.3 ms; MongoDB's Kingfisher SDK 1.5
(native, 35 MB installed, 1.5 s to compile its rules) found 27 at 22 µs. They look for provider token
shapes in source files; what agents' commands carry is mostly ``name=value`` pairs, command-line
password options and encoded text, which none of them reads, and the shapes they find are covered here
by prefix. The shapes above are written from the providers' documented formats.

The result is one line of at most ``limit`` characters.
"""

from __future__ import annotations

import bisect
import functools
import html
import math
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote

#: Default bound of a redacted text, in characters.
MAX_CHARS = 300
#: Text beyond this many characters is not even looked at (the result is cut well before it).
_SCAN_CHARS = 4096
MASK = "***"
#: Levels of encoding undone for matching (``%25253D`` is three).
_DECODE_LEVELS = 4
#: Masking rounds until the text no longer changes.
_ROUNDS = 3

Span = tuple[int, int]

# -- one line, nothing invisible ---------------------------------------------------------------------

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
#: Unicode format characters (category Cf) that render as nothing: they split a name for a matcher
#: (``pass\u200bword``) or reorder what a reader sees, and carry no meaning in a message.
_INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
                        "\ufff9-\ufffb\U000e0001-\U000e007f]+")


def _one_line(text: str) -> str:
    if text.isprintable():  # every character the two patterns look for is unprintable; most texts have none
        return text
    return _INVISIBLE.sub("", _CONTROL.sub(" ", text))


# -- the normalised view -----------------------------------------------------------------------------

_ESCAPED = re.compile(r"\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\[\\\"'/nrt]|%[0-7][0-9a-fA-F]"
                      r"|(?:%[89a-fA-F][0-9a-fA-F])+|&(?:[a-zA-Z]{2,8}|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
_ESCAPED_OR_WIDE = re.compile(_ESCAPED.pattern + r"|[^\x00-\x7f]")
_SIMPLE_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "/": "/", "n": "\n", "r": "\r", "t": "\t"}


def _decode(unit: str) -> str:
    """What one escape sequence or character stands for, folded (NFKC) and without invisible characters."""
    first = unit[0]
    if first == "\\":
        kind = unit[1]
        decoded = chr(int(unit[2:], 16)) if kind in "ux" else _SIMPLE_ESCAPES[kind]
    elif first == "%":
        try:
            decoded = unquote(unit, errors="strict")
        except UnicodeDecodeError:
            return unit
    elif first == "&":
        decoded = html.unescape(unit)
    else:
        decoded = unit
    if not decoded.isascii():
        decoded = _INVISIBLE.sub("", unicodedata.normalize("NFKC", decoded))
    return decoded


class _Level:
    """One level of decoding: which characters of the decoded text came from which of the text below.

    ``units`` are the decoded pieces as ``(start, end)`` in the decoded text and ``(start, end)`` in the
    text below; every other character maps one to one.
    """

    __slots__ = ("starts", "units")

    def __init__(self, units: list[tuple[int, int, int, int]]) -> None:
        self.units = units
        self.starts = [u[0] for u in units]

    def origin(self, i: int) -> Span:
        """The characters below that the decoded character at ``i`` came from."""
        k = bisect.bisect_right(self.starts, i) - 1
        if k < 0:
            return i, i + 1
        _, end, below_start, below_end = self.units[k]
        if i < end:
            return below_start, below_end
        j = i - end + below_end
        return j, j + 1


def _decode_level(text: str, pattern: re.Pattern[str]) -> tuple[str, _Level | None]:
    pieces: list[str] = []
    units: list[tuple[int, int, int, int]] = []
    pos = out = 0
    for m in pattern.finditer(text):
        unit = m.group()
        decoded = _decode(unit)
        if decoded == unit:
            continue
        start, end = m.span()
        pieces.append(text[pos:start])
        out += start - pos
        pieces.append(decoded)
        units.append((out, out + len(decoded), start, end))
        out += len(decoded)
        pos = end
    if not units:
        return text, None
    pieces.append(text[pos:])
    return "".join(pieces), _Level(units)


def _normalised(text: str) -> tuple[str, list[_Level]]:
    """The view rules match on, and the levels that lead from it back to ``text``."""
    levels: list[_Level] = []
    view = text
    for _ in range(_DECODE_LEVELS):
        wide = not view.isascii() and not unicodedata.is_normalized("NFKC", view)
        if not wide and "\\" not in view and "%" not in view and "&" not in view:
            break
        view, level = _decode_level(view, _ESCAPED_OR_WIDE if wide else _ESCAPED)
        if level is None:
            break
        levels.append(level)
    return view, levels


def _in_text(levels: list[_Level], span: Span) -> Span:
    """The characters of the text a span of the view came from."""
    start, end = span
    for level in reversed(levels):
        start, end = level.origin(start)[0], level.origin(end - 1)[1]
    return start, end


# -- rules -------------------------------------------------------------------------------------------

_NAME_CHAR = r"A-Za-z0-9_.\-"
#: A secret word inside a name. ``key``/``token`` end a word (``keystore``, ``tokenizer`` are not secret
#: names); ``pass`` and ``pw`` are words of their own (``bypass``, ``passed`` are not); ``auth`` is the
#: word or a known compound (``author``, ``authority`` are not).
_SECRET_WORD = (r"(?:key(?:s(?![a-z]))?(?![a-z])|token(?:s(?![a-z]))?(?![a-z])|secret|credential|passw(?:or)?d"
                r"|pwd|(?<!by)(?<!com)pass(?:phrase|code)?(?![a-z])|(?<![a-z])pw(?![a-z])"
                r"|auth(?:orization|token|key|secret|pass|cred|code)?(?![a-z])|private[_-]?key)")
#: Names whose value is a secret whatever it looks like; the other secret names hold counts too.
_PASSWORD_NAME = re.compile(r"(?i)pass|pwd|(?<![a-z])pw(?![a-z])|secret|credential|auth|private")
_COUNT = re.compile(r"\d{1,9}(?:\.\d+)?")
#: A value: quoted, or a run up to a separator. Never one that is already masked.
_VALUE = r"(?!\*\*\*)(?P<s>\"[^\"\n]*+\"|'[^'\n]*+'|(?![(\[{])[^\s&,;\"')}\]]++)"
_OPTION_VALUE = r"(?!\*\*\*)(?P<s>\"[^\"\n]*+\"|'[^'\n]*+'|[^\s\"'-][^\s\"']*+)"
_SCHEMES = r"(?:bearer|basic|digest|token|negotiate|ntlm)\s"


class _CommandRule:
    """The password option of a command: an option of ``commands`` anywhere in the same command (up to
    the next ``|``, ``;``, ``&`` or line, at most 300 characters on), as many times as it is given.

    Two patterns, not one: a single pattern that spans the command and its option masks one option per
    match, and ``mysql -pa -pb`` would need two rounds.
    """

    __slots__ = ("command", "groupindex", "option")

    def __init__(self, commands: str, option: str, value: str = _OPTION_VALUE) -> None:
        self.command = re.compile(rf"(?<![\w-])(?i:{commands})(?![\w-])")
        self.option = re.compile(rf"[ \t]{option}{value}")
        self.groupindex = self.option.groupindex

    def finditer(self, view: str) -> Iterator[re.Match[str]]:
        scanned = 0
        for command in self.command.finditer(view):
            start = max(command.end(), scanned)  # a stretch already read belongs to an earlier command
            stop = _COMMAND_END.search(view, command.end(), command.end() + 300)
            end = stop.start() if stop else min(len(view), command.end() + 300)
            for match in self.option.finditer(view, start):
                if match.start() >= end:
                    break
                yield match
            scanned = max(scanned, end)


_COMMAND_END = re.compile(r"[|;&\n]")


#: ``(gate, pattern)``: a pattern only runs on a text that contains one of its gate words (lower case);
#: every match of the pattern contains one. The group ``s`` is what is masked.
_NAME_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    # private key blocks (PEM, PGP), to their end or to the end of the text
    (("private key",), r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?!\*\*\*)(?P<s>.*?"
                       r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$))"),
    # Authorization: <scheme> <credentials>; Cookie: …
    (("authorization",), r"(?i)\b(?:proxy-)?authorization[\"']?\s*+[:=]\s*+[\"']?+(?:[a-z][a-z0-9-]*\s++)?+"
                         r"(?!\*\*\*)(?P<s>[^\s\"',;]++)"),
    (("cookie",), r"(?i)(?<![\w-])(?:set-)?cookie[\"']?\s*+[:=]\s*+[\"']?+(?!\*\*\*)(?P<s>[^\n\"']++)"),
    (("bearer", "basic"), r"(?i)\b(?:bearer|basic)\s++(?=[A-Za-z0-9._~+/=\-]*?(?:[0-9+/=]|(?-i:[a-z][A-Z])))"
                          r"(?P<s>[A-Za-z0-9._~+/=\-]{4,})"),
    (("token", "apikey"), r"(?i)\b(?:token|apikey)\s++(?=[A-Za-z0-9._~+/=\-]*?\d)(?P<s>[A-Za-z0-9._~+/=\-]{8,})"),
    # name = value, name: value, "name": "value"
    (("key", "token", "secret", "credential", "pass", "pwd", "pw", "auth"),
     rf"(?i)(?P<q>[\"']?)(?<![{_NAME_CHAR}])(?=[{_NAME_CHAR}]*?{_SECRET_WORD})(?P<n>[{_NAME_CHAR}]++)(?P=q)"
     rf"\s*+(?:=>|:=|[:=])\s*+(?!{_SCHEMES})" + _VALUE),
    # --name value, -name value
    (("key", "token", "secret", "credential", "pass", "pwd", "pw", "auth"),
     rf"(?i)(?<![\w-])(?=-{{1,2}}[{_NAME_CHAR}]*?{_SECRET_WORD})(?P<n>-{{1,2}}[{_NAME_CHAR}]++)\s++"
     + _OPTION_VALUE),
    # .netrc: machine x login y password z
    (("password",), r"(?i)\blogin\s++\S++\s++password\s++(?!\*\*\*)(?P<s>\S++)"),
    # requests: auth=('user', 'password')
    (("auth",), r"(?i)\bauth\s*+=\s*+\(\s*+(?P<qa>[\"'])[^\"'\n]*(?P=qa)\s*+,\s*+(?!\*\*\*)(?P<s>[\"'][^\"'\n]*[\"'])"),
    # URLs: scheme://user:password@host (the last @ of the authority), scheme://token@host, signatures
    (("://",), r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s:/@]*+:(?!\*\*\*)(?P<s>[^\s/?#]*)@"),
    (("://",), r"(?i)\b[a-z][a-z0-9+.\-]*://(?P<s>[A-Za-z0-9_\-]{20,}+)(?=[:@])"),
    (("sig",), r"(?i)[?&;](?:sig|signature|x-amz-signature|x-goog-signature)=(?!\*\*\*)(?P<s>[^&\s#\"']++)"),
)
#: Password options of command-line tools, each found after its command's name.
_COMMAND_RULES: tuple[tuple[tuple[str, ...], str | _CommandRule], ...] = (
    (("curl",), _CommandRule("curl", r"(?:-u|--user|-U|--proxy-user)(?:\s*+|=)[\"']?[^\s:'\"]++:",
                         r"(?!\*\*\*)(?P<s>[^\s'\"]++)")),
    (("mysql", "mariadb"), _CommandRule(r"mysql\w*|mariadb[\w-]*", "-p", r"(?!\*\*\*)(?P<s>[^\s-]\S*+)")),
    (("sshpass",), _CommandRule("sshpass", r"-p\s*+")),
    (("login",), _CommandRule(r"(?:docker|podman|nerdctl|buildah|skopeo|oras|az)\s+login", r"-p\s*+")),
    (("redis",), _CommandRule(r"redis-cli", r"-a\s*+")),
    (("sqlcmd", "bcp", "osql", "isql"), _CommandRule("sqlcmd|bcp|osql|isql", r"-P\s*+")),
    (("mongo", "cqlsh", "twine"), _CommandRule(r"mongo\w*|cqlsh|twine", r"-p\s*+")),
    (("ldap",), _CommandRule(r"ldap\w+", r"-w\s*+")),
    (("smb", "rpcclient"), _CommandRule(r"smb\w+|rpcclient", r"(?:-U\s*+|--user(?:name)?=)[^\s%]++%",
                                     r"(?!\*\*\*)(?P<s>\S++)")),
    (("zip",), _CommandRule(r"\w*zip\w*", r"-P\s*+")),
    (("7z",), _CommandRule(r"7z[ar]?", "-p", r"(?!\*\*\*)(?P<s>\S++)")),
    (("mosquitto",), _CommandRule(r"mosquitto_\w+", r"-P\s*+")),
    (("openssl",), _CommandRule("openssl", r"-k\s++")),
    (("ssh-keygen",), _CommandRule("ssh-keygen", r"-[NP]\s*+")),
    (("lftp",), _CommandRule("lftp", r"-u\s*+[^\s,]++,", r"(?!\*\*\*)(?P<s>\S++)")),
    (("sqlplus",), r"(?i)\bsqlplus\s++(?:-\S+\s++)*[^\s/@-][^\s/@]*+/(?!\*\*\*)(?P<s>[^\s@]++)"),
    (("htpasswd",), r"(?i)\bhtpasswd\s++-(?=[a-z]*b)(?=[a-z]*n)[a-z]++\s++\S++\s++(?!\*\*\*)(?P<s>\S++)"),
    (("htpasswd",), r"(?i)\bhtpasswd\s++-(?=[a-z]*b)(?![a-z]*n)[a-z]++\s++\S++\s++\S++\s++(?!\*\*\*)(?P<s>\S++)"),
    (("rabbitmqctl",), r"(?i)\brabbitmqctl\s++(?:add_user|change_password)\s++\S++\s++(?!\*\*\*)(?P<s>\S++)"),
    (("vault",), r"(?i)\bvault\s++login\s++(?![-*])(?P<s>[^\s=]++)(?!=)"),
)
#: Token shapes that contain dots (the others are found by their prefix among long runs, below).
_SHAPE_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("eyj",), r"\b(?P<s>eyJ[A-Za-z0-9_\-]++\.[A-Za-z0-9_\-]++\.?[A-Za-z0-9_\-]*+)"),
    (("sg.",), r"\b(?P<s>SG\.[A-Za-z0-9_\-]{16,}+\.[A-Za-z0-9_\-]{16,}+)"),
    (("hvs.", "hvb.", "hvr.", "ya29.", "dp."),
     r"\b(?P<s>(?:hv[sbr]|ya29|dp\.(?:pt|st|sa|ct|scim|audit))\.[A-Za-z0-9_\-]{20,}+)"),
    (("akia", "asia", "abia", "acca"), r"\b(?P<s>(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})\b"),
)


def _group(table: tuple[tuple[tuple[str, ...], str | _CommandRule], ...], *words: str
           ) -> tuple[tuple[str, ...], tuple[tuple[tuple[str, ...], re.Pattern[str] | _CommandRule], ...]]:
    """Rules with the words of which a text must contain one for any of them to match."""
    if not words:  # every rule's words, less those that contain another (``pass`` finds ``password``)
        every = {word for rule_gate, _ in table for word in rule_gate}
        words = tuple(sorted(w for w in every if not any(o != w and o in w for o in every)))
    return words, tuple((rule_gate, pattern if isinstance(pattern, _CommandRule) else re.compile(pattern, re.S))
                        for rule_gate, pattern in table)


#: The rules in three groups, each with one check that lets most texts skip the whole group.
_RULES = (_group(_NAME_RULES), _group(_COMMAND_RULES), _group(_SHAPE_RULES))


def _keep(rule: re.Pattern[str] | _CommandRule, match: re.Match[str]) -> bool:
    """A ``key``/``token`` name with a plain number (``max_tokens=1024``) is a count, not a secret."""
    if "n" not in rule.groupindex or not _COUNT.fullmatch(match.group("s")):
        return False
    return not _PASSWORD_NAME.search(match.group("n"))


def _rule_spans(view: str, gated: bool = True) -> list[Span]:
    """What the rules mask in ``view``; with ``gated``, a rule runs only if one of its words is there."""
    lowered = view.lower()
    spans = []
    for group_gate, rules in _RULES:
        if gated and not _any_in(group_gate, lowered):
            continue
        for gate, rule in rules:
            if gated and not _any_in(gate, lowered):
                continue
            for match in rule.finditer(view):
                start, end = match.span("s")
                if start < end and not _keep(rule, match):
                    spans.append((start, end))
    return spans


def _any_in(words: tuple[str, ...], text: str) -> bool:
    for word in words:  # noqa: SIM110 (a plain loop: twice as fast as any() over a generator here)
        if word in text:
            return True
    return False


# -- long random-looking runs ------------------------------------------------------------------------

#: Documented prefixes of provider tokens (GitHub, GitLab, Slack, Stripe, OpenAI/Anthropic, Google,
#: npm, PyPI, Hugging Face, DigitalOcean, Shopify, Linear, Postman, Pulumi, Sentry, Grafana, Atlassian,
#: Heroku, age, Replicate, Groq, Perplexity, xAI, Tavily, LangSmith, OpenRouter): a run of 20 or more
#: token characters that starts with one is masked whatever its entropy.
_TOKEN_PREFIXES = (
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-", "glrt-", "glcbt-", "glptt-",
    "glft-", "glsoat-", "glimt-", "glagent-", "gloas-", "GR1348941", "xoxb-", "xoxp-", "xoxa-", "xoxo-",
    "xoxs-", "xoxr-", "xoxe-", "xapp-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_", "sk-",
    "pk-", "rk-", "AIza", "GOCSPX-", "npm_", "pypi-", "hf_", "api_org_", "dop_v1_", "doo_v1_", "dor_v1_",
    "shpat_", "shpca_", "shppa_", "shpss_", "lin_api_", "PMAK-", "pul-", "sntrys_", "sntryu_", "glc_",
    "glsa_", "ATATT3", "HRKU-", "AGE-SECRET-KEY-1", "r8_", "gsk_", "pplx-", "xai-", "tvly-", "lsv2_pt_",
    "lsv2_sk_",
)
_CANDIDATE = re.compile(r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+/=_\-]{20,}+")
_SEPARATORS = re.compile(r"[-_.]")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
#: A path segment that is a word (``src``, ``Users``): the run it is in is a path, not a key.
_WORD_SEGMENT = re.compile(r"[a-z]{3,}|[A-Z][a-z]{2,}")
#: Words just before a hex run that make it an identifier to read: a commit, a digest, a trace or span id.
_HEX_CONTEXT = re.compile(r"(?i)(?:\bgit\b|\bcommits?\b|\bsha(?:1|256|512)?\b|\brev(?:ision)?\b|\bdigest\b"
                          r"|\btrace(?:[_ -]?id)?\b|\bspan(?:[_ -]?id)?\b|traceparent)[^\n]{0,40}$")


def _entropy(text: str) -> float:
    """Shannon entropy of the characters of ``text``, in bits per character."""
    n = len(text)
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _random_run(token: str) -> bool:
    digits = sum(ch.isdigit() for ch in token)
    letters = sum(ch.isalpha() for ch in token)
    if not digits or not letters:
        return False  # words, hyphenated names, numbers
    upper = sum(ch.isupper() for ch in token)
    mixed_case = 0 < upper < letters
    if digits / len(token) < 0.1 and not mixed_case:
        return False  # a name with a version or a year in it
    return _entropy(token) >= (3.0 if mixed_case else 3.3)


def looks_random(token: str) -> bool:
    """Whether a run of base64/hex characters looks like a generated secret rather than a word or path."""
    if _UUID.fullmatch(token) or _TRACEPARENT.fullmatch(token):
        return False
    if _HEX.fullmatch(token):
        return True
    if "/" in token:
        if any(_WORD_SEGMENT.fullmatch(part) for part in token.split("/")):
            return False  # a path: its long segments are judged on their own
        token = token.replace("/", "")  # base64 with slashes in it (an AWS secret key)
    parts = _SEPARATORS.split(token)
    if len(parts) >= 3 and 2 * sum(part.isalpha() for part in parts) >= len(parts):
        # a hyphenated or snake_case name (python3-site-packages-2024), unless a part of it is a key
        return any(len(part) >= 16 and _random_run(part) for part in parts)
    return _random_run(token)


def _is_secret(view: str, start: int, token: str) -> bool:
    if token.startswith(_TOKEN_PREFIXES):
        return True
    if not looks_random(token):
        return False
    return not (_HEX.fullmatch(token) and _HEX_CONTEXT.search(view, max(0, start - 60), start))


def _pieces(token: str, start: int) -> list[tuple[str, int]]:
    """The parts of a run between ``=`` (not padding) and ``/``, with their offsets in the view."""
    out = []
    begin = 0
    for i, ch in enumerate(token):
        if ch == "/" or (ch == "=" and i + 1 < len(token) and token[i + 1] != "="):
            out.append((token[begin:i], start + begin))
            begin = i + 1
    out.append((token[begin:], start + begin))
    return out


def _random_spans(view: str) -> list[Span]:
    spans = []
    for match in _CANDIDATE.finditer(view):
        token = match.group().lstrip("/")  # the slashes of ``://`` or of a root are no part of a key
        start = match.end() - len(token)
        if len(token) < 20:
            continue
        if ("=" not in token.rstrip("=") or token.startswith(_TOKEN_PREFIXES)) and _is_secret(view, start, token):
            spans.append((start, match.end()))
        elif "/" in token or "=" in token:
            spans.extend((at, at + len(piece)) for piece, at in _pieces(token, start)
                         if len(piece) >= 20 and _is_secret(view, at, piece))
    return spans


# -- masking -----------------------------------------------------------------------------------------


def _masked_once(text: str) -> str:
    view, levels = _normalised(text)
    spans = _rule_spans(view) + _random_spans(view)
    if not spans:
        return text
    if levels:
        spans = [_in_text(levels, span) for span in spans]
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out = []
    pos = 0
    for start, end in merged:
        out.append(text[pos:start])
        out.append(MASK)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = limit - 1
    mask = text.rfind(MASK, max(0, cut - len(MASK) + 1), cut + len(MASK) - 1)
    if mask != -1 and mask < cut < mask + len(MASK):
        cut = mask  # never leave half a mask (it would read as a value on the next redaction)
    return text[:cut] + "…"


@functools.lru_cache(maxsize=512)
def _redacted(text: str, limit: int) -> str:
    out = _one_line(text)
    for _ in range(_ROUNDS):
        again = _cut(_masked_once(out), limit)
        if again == out:
            break
        out = again
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

