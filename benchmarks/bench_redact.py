"""Coverage and cost of redaction: how many credential forms of the test table leak, how many plain texts are
changed, and the cost of one call in microseconds.

    python benchmarks/bench_redact.py [--repeat 20] [--compare]

Forms are the table of ``tests/credential_forms.py`` (the one the tests hold redaction to). Costs are
per call on inputs not seen before (the memo of :func:`otelloop.redact.redact` is cleared before each
call, as for a new message) over three sets: the credential forms, the plain forms, and detector messages
as they are redacted in a loop (``drift test_fail_loop on '<command>': hard …``).

``--compare`` also measures the secret-detection libraries for Python that were candidates to build on,
when they are importable (install them in a scratch virtual environment; none is a dependency):
``detect-secrets`` (Yelp, its plugins with the default settings, line by line), ``bc-detect-secrets``
(its fork, same module name: run once per environment), ``microsoft-security-utilities-secret-masker``
(its bundled rule files), ``kingfisher-secret-scanner`` (MongoDB's Kingfisher rules, native). Each
masks what it finds with ``***``; coverage is counted on the same table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from credential_forms import PLAIN_FORMS, SECRET_FORMS, leaks  # noqa: E402

from otelloop import redact as redact_module  # noqa: E402

LOOP_MESSAGES = [f"drift test_fail_loop on 'pytest tests/test_{i}.py -x': hard (EMA 0.{i % 10}), held {i} times"
                 for i in range(200)]


def ours(text: str) -> str:
    redact_module._redacted.cache_clear()
    return redact_module.redact(text, 4096)


def score(name: str, mask: Callable[[str], str], repeat: int) -> None:
    leaked = [form_id for form_id, text, secrets in SECRET_FORMS if leaks(secrets, mask(text))]
    changed = [text for text in PLAIN_FORMS if mask(text) != text]
    print(f"{name}: {len(leaked)} of {len(SECRET_FORMS)} credential forms leak, "
          f"{len(changed)} of {len(PLAIN_FORMS)} plain texts changed")
    if leaked:
        print("  leaks: " + "; ".join(leaked))
    if changed:
        print("  changed: " + "; ".join(changed))
    for label, texts in (("credential forms", [t for _, t, _ in SECRET_FORMS]), ("plain forms", PLAIN_FORMS),
                         ("loop messages", LOOP_MESSAGES)):
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            for text in texts:
                mask(text)
            runs.append((time.perf_counter() - start) / len(texts) * 1e6)
        print(f"  {label}: {statistics.median(runs):.1f} µs per call (median of {repeat})")
    big = "x=" + "A1b2/" * 800
    start = time.perf_counter()
    mask(big)
    print(f"  one 4 KB adversarial text: {(time.perf_counter() - start) * 1e3:.1f} ms")


def detect_secrets_masker() -> Callable[[str], str] | None:
    """Its full scan of a file (plugins with their default limits, then its heuristic filters): the
    ad-hoc ``scan_line`` reports every word's entropy and is no masker."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    import tempfile

    def mask(text: str) -> str:
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f, default_settings():
            f.write(text)
            f.flush()
            found = SecretsCollection()
            found.scan_file(f.name)
            for _, secret in found:
                if secret.secret_value:
                    text = text.replace(secret.secret_value, "***")
        return text
    return mask


def microsoft_masker() -> Callable[[str], str] | None:
    try:
        from microsoft_security_utilities_secret_masker import SecretMasker, load_regex_patterns_from_json_file
    except ImportError:
        return None
    patterns = set()
    for name in ("PreciselyClassifiedSecurityKeys.json", "UnclassifiedPotentialSecurityKeys.json"):
        patterns |= load_regex_patterns_from_json_file(name)
    masker = SecretMasker(patterns)
    return lambda text: str(masker.mask_secrets(text))


def kingfisher_masker() -> Callable[[str], str] | None:
    try:
        from kingfisher_sdk import Scanner
    except ImportError:
        return None
    scanner = Scanner()

    def mask(text: str) -> str:
        for finding in scanner.scan(text):
            if finding.secret:
                text = text.replace(finding.secret, "***")
        return text
    return mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    score("otelloop.redact", ours, args.repeat)
    if args.compare:
        for name, make in (("detect-secrets", detect_secrets_masker), ("secret-masker", microsoft_masker),
                           ("kingfisher", kingfisher_masker)):
            mask = make()
            if mask is None:
                print(f"{name}: not installed")
            else:
                score(name, mask, max(1, args.repeat // 4))


if __name__ == "__main__":
    main()
