"""Secret-looking values are masked in everything otelloop remembers or shows (otelloop.redact)."""

from __future__ import annotations

import time

import pytest
from credential_forms import PLAIN_FORMS, SECRET_FORMS, leaks
from hypothesis import given, settings
from hypothesis import strategies as st

from otelloop import redact as redact_module
from otelloop.redact import MASK, redact


@pytest.mark.parametrize(("text", "expected"), [
    # authorization headers and schemes
    ('curl -H "Authorization: Bearer abcdef123456" https://api.example.com',
     'curl -H "Authorization: Bearer ***" https://api.example.com'),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNz' x", "curl -H 'Authorization: Basic ***' x"),
    ("Authorization=abc123def", "Authorization=***"),
    ("x-api-key: 0a1b2c3d", "x-api-key: ***"),
    ("cookie: session=abcdef0123", "cookie: ***"),
    ("token aGVsbG8gd29ybGQgdGhpcyBpcyBhIHNlY3JldA==", "token ***"),
    # secret-looking names, in every common spelling
    ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234", "export OPENAI_API_KEY=***"),
    ("run --token=abc123 now", "run --token=*** now"),
    ("mysql --password hunter2 -u root", "mysql --password *** -u root"),
    ('{"password": "p@ss w0rd", "user": "bob"}', '{"password": ***, "user": "bob"}'),
    ("client_secret: s3cr3t-value", "client_secret: ***"),
    ("GET /cb?code=1&access_token=ya29.a0AfH6SM&state=x", "GET /cb?code=1&access_token=***&state=x"),
    ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
    ("secret: abc", "secret: ***"),
    # credentials in URLs
    ("psql postgres://app:hunter2@db:5432/x", "psql postgres://app:***@db:5432/x"),
    # well-known token shapes
    ("echo ghp_abcdefghijklmnopqrstuvwxyz0123", "echo ***"),
    ("AWS AKIAIOSFODNN7EXAMPLE key", "AWS *** key"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.abc_def", "jwt ***"),
    ("slack xoxb-123456789012-abcdefghij", "slack ***"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
     "-----BEGIN RSA PRIVATE KEY-----***"),
    # long high-entropy strings
    ("upload with X9fK2mQ7vL0pR4sT8wY1zB3n as the id", "upload with *** as the id"),
    ("upload 3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a", "upload ***"),
    # what must stay readable
    ("cat /home/user/projects/otelloop/otelloop/detectors/engine.py",
     "cat /home/user/projects/otelloop/otelloop/detectors/engine.py"),
    ("pytest tests/test_admin.py::test_sessions_are_listed_most_severe_first_and_filtered -q",
     "pytest tests/test_admin.py::test_sessions_are_listed_most_severe_first_and_filtered -q"),
    ("pip install python3-site-packages-2024", "pip install python3-site-packages-2024"),
    ("the token limit was hit", "the token limit was hit"),
    ("drift test_fail_loop on 'pytest -x': hard (EMA 0.7)", "drift test_fail_loop on 'pytest -x': hard (EMA 0.7)"),
    ("entropy 0.2: 'search_web' (execute_tool, success) is 5 of the last 5 steps",
     "entropy 0.2: 'search_web' (execute_tool, success) is 5 of the last 5 steps"),
    ("<img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"),
    # one line
    ("line1\nline2\ttab\r\n", "line1 line2 tab "),
    ("", ""),
])
def test_redaction_table(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_cut_to_the_bound_after_masking() -> None:
    assert redact("x" * 1000) == "x" * 299 + "…"
    assert len(redact("a " * 5000, limit=50)) == 50
    # a secret straddling the bound is masked before the cut, never left half visible
    text = "y" * 280 + " password=hunter2hunter2hunter2"
    assert "hunter2" not in redact(text)


def test_huge_input_is_bounded_and_fast_to_refuse() -> None:
    out = redact("Bearer " + "A1b2" * 500_000)
    assert out == "Bearer ***"
    assert MASK in redact("k" * 10 + " token=" + "z9" * 100_000)



@pytest.mark.parametrize(("form", "text", "secrets"), SECRET_FORMS, ids=[f[0] for f in SECRET_FORMS])
def test_credential_forms_are_masked(form: str, text: str, secrets: tuple[str, ...]) -> None:
    """The table of real-world credential forms (commands, configuration, headers, URLs, encodings,
    look-alike characters, provider token shapes, key blocks): none of the secrets is left readable."""
    assert len(SECRET_FORMS) >= 60
    out = redact(text, 4096)
    assert leaks(secrets, out) == [], out
    assert MASK in out


@pytest.mark.parametrize("text", PLAIN_FORMS)
def test_plain_texts_stay_whole(text: str) -> None:
    """Paths, URLs, commit ids, digests, UUIDs, trace ids, port options, counts, code and prose."""
    assert len(PLAIN_FORMS) >= 15
    assert redact(text, 4096) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("curl -u admin:hunter2 https://x.example.com", "curl -u admin:*** https://x.example.com"),
    ("mysql -u root -phunter2 app", "mysql -u root -p*** app"),
    ('echo "{\\"password\\": \\"hunter2\\"}"', 'echo "{\\"password\\": ***}"'),
    ("body=user%3Dbob%26password%3Dhunter2", "body=user%3Dbob%26password%3D***"),
    ("h=Authorization%3A%20Bearer%20tok3n-deadbeef42", "h=Authorization%3A%20Bearer%20***"),
    ("&quot;password&quot;: &quot;hunter2&quot;", "&quot;password&quot;: ***"),
    ("password＝hunter2", "password＝***"),
    ("ＰＡＳＳＷＯＲＤ=hunter2", "ＰＡＳＳＷＯＲＤ=***"),
    ("pass\u200bword=hunter2", "password=***"),
    ("sshpass -p hunter2 ssh deploy@host", "sshpass -p *** ssh deploy@host"),
    ("docker login -u bob -p hunter2 ghcr.io", "docker login -u bob -p *** ghcr.io"),
    ("redis-cli -h cache -p 6379 -a hunter2 ping", "redis-cli -h cache -p 6379 -a *** ping"),
    ('{"user": "bob", "pass": "hunter2"}', '{"user": "bob", "pass": ***}'),
    ("PASS=hunter2 DB_PW=hunter3 passphrase=hunter4", "PASS=*** DB_PW=*** passphrase=***"),
    ("pay sk_live_51HqLyjWDarjtT1zdp7dc4eC3 now", "pay *** now"),
    ("export CI=glpat-9xKq2LmNp4RsTv6WyZ8b", "export CI=***"),
    ("echo wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY | aws", "echo *** | aws"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGVh3k8BCADx\n-----END PGP PRIVATE KEY BLOCK----- done",
     "-----BEGIN PGP PRIVATE KEY BLOCK-----*** done"),
    ("psql postgres://app:p@ss@db/app", "psql postgres://app:***@db/app"),
    ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
    ("smbclient //fs/share -U bob%hunter2 -c ls", "smbclient //fs/share -U bob%*** -c ls"),
])
def test_the_secret_is_masked_and_the_structure_kept(text: str, expected: str) -> None:
    """Matching reads a decoded, folded view; masking changes only the secret's own characters in the text
    as written, so key names, separators and encodings stay readable."""
    assert redact(text) == expected


@pytest.mark.parametrize(("form", "text", "secrets"), SECRET_FORMS, ids=[f[0] for f in SECRET_FORMS])
def test_redacting_a_credential_form_twice_changes_nothing(form: str, text: str, secrets: tuple[str, ...]) -> None:
    for limit in (40, 300):
        once = redact(text, limit)
        assert redact(once, limit) == once


#: Texts of the largest size looked at (4096 characters) built to make a backtracking matcher go
#: quadratic or worse: long runs of name characters, many rule words or commands and no value, unclosed
#: blocks, escapes everywhere.
ADVERSARIAL = [
    "a" * 4090 + " key=x",
    "key" * 1365,
    "key=" * 1024,
    "-" * 4090 + "token",
    "--password " * 372,
    "curl " * 819,
    "curl -u " + "a" * 4080,
    "mysql " + "-" * 4080,
    "https://" + "a:" * 2040,
    "https://a:" + "b" * 4080,
    "://" * 1365,
    "-----BEGIN RSA PRIVATE KEY-----" * 132,
    "Bearer " + "A1b2" * 1022,
    "basic " * 682,
    "A1b2/" * 819,
    "a-" * 2048,
    "%25" * 1365,
    "\\\\" * 2048,
    "\\u0041" * 682,
    "&quot;" * 682,
    "ＡＢＣ" * 1365,
    "\u200b" * 4096,
    "eyJ" + "a." * 2045,
    "sqlplus " + "-x " * 1360,
    "htpasswd -" + "b" * 4080,
    "auth=(" + "'a', " * 800,
    "login " * 682 + "password",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_the_cost_of_a_hostile_text_is_bounded(text: str) -> None:
    """Every pattern is linear in the text (possessive runs, bounded gaps, anchored starts): a hostile
    text of the largest size read costs milliseconds (a generous bound of one second here, for a shared
    machine; catastrophic backtracking would take minutes)."""
    redact_module._redacted.cache_clear()
    start = time.perf_counter()
    out = redact(text * 2, 300)  # twice the size read: the rest is never looked at
    assert time.perf_counter() - start < 1.0
    assert len(out) <= 300


_RULE_TOKENS = st.sampled_from(
    [*"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.:/=@'\"\n%\\&;,*",
     "key", "KEY", "token", "Bearer ", "basic ", "password", "pass", "pw", "pwd", "secret", "Auth", "cookie",
     "://", "sk-", "ghp_", "glpat-", "sk_live_", "xox", "AKIA", "ASIA", "eyJ", "SG.", "hvs.", "sig=",
     "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "--api-key ", "curl -u ", "mysql -p",
     "sshpass -p ", "docker login -p ", "redis-cli -a ", " -P ", "%3D", "%25", "\\\"", "\\\\", "\\u003d",
     "&quot;", "＝", "ｐａｓｓ", "\u200b", "\u202e", "***", "…", "login x password ", "auth=('a', ",
       "3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c", "X9fK2mQ7vL0pR4sT8wY1zB3n", "max_tokens=12"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_RULE_TOKENS, max_size=60).map("".join))
def test_the_gates_never_skip_a_rule_that_would_mask(text: str) -> None:
    """The words that let a text skip a group of rules, or a rule, never skip one that would mask
    something: gated and ungated matching find the same."""
    view, _ = redact_module._normalised(redact_module._one_line(text))
    assert redact_module._rule_spans(view) == redact_module._rule_spans(view, gated=False)


@pytest.mark.parametrize("text", [
    "-----BEGIN PRIVATE KEY-----abc", "Authorization: Bearer abcd1234", "curl -H Bearer abcd1234",
    "basic dXNlcjpwYXNz", "token abcd12345678", "apikey abcd12345678", "Cookie: sid=abc", "X-Api-Key: abc",
    "postgres://app:hunter2@db", "https://0123456789abcdefghij@github.com", "?sig=abc", "pwd=abc",
    "passwd: abc", "password=abc", "PASS=abc", "DB_PW=abc", "client_secret=abc", "credential=abc",
    "auth=abc", "key=abc", "--token abc", "--password abc", "-storepass abc", "login bob password abc",
    "auth=('bob', 'abc')", "curl -u bob:abc", "mysql -pabc", "sshpass -p abc", "docker login -p abc",
    "az login -p abc", "redis-cli -a abc", "sqlcmd -P abc", "mongosh -p abc", "cqlsh -p abc", "twine -p abc",
    "ldapsearch -w abc", "smbclient -U bob%abc", "zip -P abc", "7z -pabc", "mosquitto_pub -P abc",
    "openssl enc -k abc", "ssh-keygen -N abc", "lftp -u bob,abc", "sqlplus bob/abc@db",
    "htpasswd -nb bob abc", "htpasswd -b f bob abc", "rabbitmqctl add_user bob abc", "vault login abc",
    "eyJhbGciOi.eyJzdWIiOi.sig", "SG.abcdefghijklmnopqr.abcdefghijklmnopqr", "hvs.abcdefghijklmnopqrstuv",
    "ya29.abcdefghijklmnopqrstuv", "AKIAABCDEFGHIJKLMNOP", "ASIAABCDEFGHIJKLMNOP",
])
def test_every_rule_is_reached_through_the_gates(text: str) -> None:
    """One example per rule and per word a rule looks for: the rules mask something in it, and the gates
    let it through to them."""
    view, _ = redact_module._normalised(text)
    spans = redact_module._rule_spans(view)
    assert spans
    assert spans == redact_module._rule_spans(view, gated=False)


@settings(max_examples=400, deadline=None)
@given(st.lists(_RULE_TOKENS, max_size=60).map("".join), st.sampled_from([10, 40, 300]))
def test_redacting_a_redacted_text_changes_nothing(text: str, limit: int) -> None:
    """A session keeps a vote as it was redacted and skips redacting the same vote again on the next
    step; that is right only because redaction is idempotent."""
    once = redact(text, limit)
    assert redact(once, limit) == once
