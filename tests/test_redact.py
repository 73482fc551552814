"""Secret-looking values are masked in everything otelloop remembers or shows (otelloop.redact)."""

from __future__ import annotations

import pytest
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
     "-----BEGIN PRIVATE KEY-----***"),
    # long high-entropy strings
    ("upload with X9fK2mQ7vL0pR4sT8wY1zB3n as the id", "upload with *** as the id"),
    ("git checkout 3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a", "git checkout ***"),
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



_RULE_TOKENS = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.:/=@'\"\n")
    + ["key", "KEY", "token", "Bearer ", "basic ", "password", "pwd", "secret", "Auth", "cookie", "://",
       "sk-", "ghp_", "xox", "AKIA", "ASIA", "eyJ", "-----BEGIN RSA PRIVATE KEY-----", "--api-key "])


@settings(max_examples=400, deadline=None)
@given(st.lists(_RULE_TOKENS, max_size=60).map("".join))
def test_texts_that_skip_the_rules_are_those_no_rule_changes(text: str) -> None:
    """The shortcut that skips the masking rules for texts without any of their words never skips a text
    some rule would change."""
    if not redact_module._might_match_a_rule(text):
        assert redact_module._apply_rules(text) == text


@pytest.mark.parametrize("text", [
    "-----BEGIN PRIVATE KEY-----abc", "Authorization: Bearer abcd1234", "curl -H Bearer abcd1234", "basic dXNlcjpwYXNz", "Digest abcdef12",
    "token abcd12345678", "apikey abcd12345678", "Cookie: sid=abc", "X-Api-Key: abc", "postgres://app:hunter2@db",
    "pwd=abc", "passwd: abc", "password=abc", "client_secret=abc", "credential=abc", "auth=abc", "key=abc",
    "--token abc", "--password abc", "sk-abcdefghijklmnopqrst", "pk-abcdefghijklmnopqrst", "rk-abcdefghijklmnopqrst",
    "ghp_abcdefghijklmnopqrstu", "gho_abcdefghijklmnopqrstu", "ghu_abcdefghijklmnopqrstu",
    "ghs_abcdefghijklmnopqrstu", "ghr_abcdefghijklmnopqrstu", "xoxb-1234567890", "AKIAABCDEFGHIJKLMNOP",
    "ASIAABCDEFGHIJKLMNOP", "eyJhbGciOi.eyJzdWIiOi.sig",
])
def test_every_rule_is_reached_through_the_shortcut(text: str) -> None:
    """One example per rule and per word a rule looks for: the rules change it, and the shortcut lets it
    through to them."""
    assert redact_module._apply_rules(text) != text
    assert redact_module._might_match_a_rule(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(_RULE_TOKENS, max_size=60).map("".join), st.sampled_from([10, 40, 300]))
def test_redacting_a_redacted_text_changes_nothing(text: str, limit: int) -> None:
    """A session keeps a vote as it was redacted and skips redacting the same vote again on the next
    step; that is right only because redaction is idempotent."""
    once = redact(text, limit)
    assert redact(once, limit) == once
