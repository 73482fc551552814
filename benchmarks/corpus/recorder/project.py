"""The small Python project of the workspaces: modules with a seedable bug each, and their pytest tests.

A module's ``buggy`` source differs from ``fixed`` in one line (``bug`` → ``fix``); with the bug, exactly
``failing`` of its tests fail. ``wrong`` lists edits of that line that keep the same failure (what a stuck
agent keeps trying).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Module:
    name: str
    template: str  # source with {LINE} where the bug/fix line goes
    bug: str
    fix: str
    wrong: tuple[str, ...]
    tests: str
    failing: int

    @property
    def buggy(self) -> str:
        return self.template.replace("{LINE}", self.bug)

    @property
    def fixed(self) -> str:
        return self.template.replace("{LINE}", self.fix)

    def with_line(self, line: str) -> str:
        return self.template.replace("{LINE}", line)

    @property
    def path(self) -> str:
        return f"src/{self.name}.py"

    @property
    def test_path(self) -> str:
        return f"tests/test_{self.name}.py"


def _m(name: str, template: str, bug: str, fix: str, wrong: tuple[str, ...], tests: str, failing: int) -> Module:
    return Module(name, template.strip() + "\n", bug, fix, wrong, tests.strip() + "\n", failing)


MODULES: dict[str, Module] = {m.name: m for m in [
    _m("pricing", '''
"""Prices and discounts."""


def apply_discount(price: float, rate: float) -> float:
    """Price after a discount of ``rate`` (0.2 = 20 % off), rounded to cents."""
{LINE}


def add_tax(price: float, tax: float = 0.2) -> float:
    return round(price * (1 + tax), 2)
''', "    return round(price * rate, 2)", "    return round(price * (1 - rate), 2)",
       ("    return round(price * rate, 2) if rate else price", "    return round(float(price) * rate, 2)",
        "    return round(price * abs(rate), 2)"), '''
from pricing import add_tax, apply_discount


def test_discount():
    assert apply_discount(100, 0.2) == 80


def test_discount_small():
    assert apply_discount(50, 0.1) == 45


def test_tax():
    assert add_tax(10) == 12.0
''', 2),
    _m("slug", '''
"""URL slugs."""
import re


def slugify(title: str) -> str:
    """Lowercase words joined by single dashes."""
    words = re.findall(r"[A-Za-z0-9]+", title)
{LINE}
''', '    return "_".join(w.lower() for w in words)', '    return "-".join(w.lower() for w in words)',
       ('    return "_".join(w.lower() for w in words if w)', '    return "_".join(map(str.lower, words))'), '''
from slug import slugify


def test_slug():
    assert slugify("Hello, World!") == "hello-world"


def test_slug_numbers():
    assert slugify("Top 10 tips") == "top-10-tips"
''', 2),
    _m("stats", '''
"""Small statistics helpers."""


def mean(values: list[float]) -> float:
{LINE}


def spread(values: list[float]) -> float:
    return max(values) - min(values)
''', "    return sum(values) / (len(values) + 1)", "    return sum(values) / len(values)",
       ("    return sum(values) / (len(values) + 1.0)", "    return float(sum(values)) / (len(values) + 1)"), '''
from stats import mean, spread


def test_mean():
    assert mean([2, 4, 6]) == 4


def test_spread():
    assert spread([3, 9, 1]) == 8
''', 1),
    _m("dates", '''
"""Date helpers."""
import datetime as dt


def is_weekend(day: dt.date) -> bool:
{LINE}
''', "    return day.weekday() > 5", "    return day.weekday() >= 5",
       ("    return day.weekday() > 5 and True", "    return day.isoweekday() > 6"), '''
import datetime as dt

from dates import is_weekend


def test_saturday():
    assert is_weekend(dt.date(2024, 6, 1))


def test_monday():
    assert not is_weekend(dt.date(2024, 6, 3))
''', 1),
    _m("cart", '''
"""Shopping cart totals."""


def total(items: list[tuple[str, int, float]]) -> float:
    """Sum of quantity x unit price."""
{LINE}
''', "    return round(sum(price for _, qty, price in items), 2)",
       "    return round(sum(qty * price for _, qty, price in items), 2)",
       ("    return round(sum(float(price) for _, qty, price in items), 2)",
        "    return round(sum(price for _name, qty, price in items), 2)"), '''
from cart import total


def test_total():
    assert total([("apple", 3, 0.5), ("pear", 2, 1.0)]) == 3.5


def test_empty():
    assert total([]) == 0
''', 1),
    _m("text", '''
"""Text utilities."""


def truncate(text: str, width: int) -> str:
    """At most ``width`` characters, ending with an ellipsis when cut."""
    if len(text) <= width:
        return text
{LINE}
''', '    return text[:width] + "…"', '    return text[: width - 1] + "…"',
       ('    return text[:width].rstrip() + "…"', '    return (text[:width] + "…")'), '''
from text import truncate


def test_short():
    assert truncate("abc", 5) == "abc"


def test_cut():
    assert len(truncate("abcdefgh", 5)) == 5
''', 1),
    _m("inventory", '''
"""Stock levels."""


def needs_reorder(stock: int, threshold: int) -> bool:
{LINE}
''', "    return stock < threshold - 1", "    return stock <= threshold",
       ("    return stock < (threshold - 1)", "    return stock + 1 < threshold"), '''
from inventory import needs_reorder


def test_at_threshold():
    assert needs_reorder(5, 5)


def test_below():
    assert needs_reorder(4, 5)


def test_above():
    assert not needs_reorder(9, 5)
''', 2),
    _m("temps", '''
"""Temperature conversion."""


def c_to_f(celsius: float) -> float:
{LINE}
''', "    return celsius * 9 / 5 + 23", "    return celsius * 9 / 5 + 32",
       ("    return celsius * 1.8 + 23", "    return (celsius * 9) / 5 + 23"), '''
from temps import c_to_f


def test_freezing():
    assert c_to_f(0) == 32


def test_boiling():
    assert c_to_f(100) == 212
''', 2),
    _m("names", '''
"""Person names."""


def initials(full_name: str) -> str:
{LINE}
''', '    return "".join(p[0] for p in full_name.split())',
       '    return "".join(p[0].upper() for p in full_name.split())',
       ('    return "".join(p[:1] for p in full_name.split())',), '''
from names import initials


def test_initials():
    assert initials("ada lovelace") == "AL"
''', 1),
    _m("paging", '''
"""Pagination."""


def page_count(items: int, per_page: int) -> int:
{LINE}
''', "    return items // per_page", "    return -(-items // per_page)",
       ("    return int(items / per_page)", "    return items // per_page + 0"), '''
from paging import page_count


def test_exact():
    assert page_count(20, 10) == 2


def test_partial():
    assert page_count(21, 10) == 3
''', 1),
    _m("emails", '''
"""E-mail checks."""


def is_valid(address: str) -> bool:
{LINE}
''', '    return "@" in address', '    return address.count("@") == 1 and "." in address.split("@")[-1]',
       ('    return "@" in address and len(address) > 3',), '''
from emails import is_valid


def test_ok():
    assert is_valid("ada@example.org")


def test_no_domain():
    assert not is_valid("ada@localhost")


def test_two_ats():
    assert not is_valid("a@b@example.org")
''', 2),
    _m("retry", '''
"""Retry back-off."""


def backoff(attempt: int, base: float = 0.5) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based), doubling each time."""
{LINE}
''', "    return base * 2 ** attempt", "    return base * 2 ** (attempt - 1)",
       ("    return base * (2 ** attempt)", "    return base * pow(2, attempt)"), '''
from retry import backoff


def test_first():
    assert backoff(1) == 0.5


def test_third():
    assert backoff(3) == 2.0
''', 2),
    _m("units", '''
"""Byte sizes."""


def human(size: int) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size} {unit}"
{LINE}
    return f"{size} GB"
''', "        size //= 1000", "        size //= 1024",
       ("        size = size // 1000", "        size //= 1000  # kB"), '''
from units import human


def test_kb():
    assert human(2048) == "2 KB"


def test_mb():
    assert human(2_000_000) == "1 MB"
''', 1),
    _m("grades", '''
"""Grades."""


def letter(score: int) -> str:
    if score >= 90:
        return "A"
{LINE}
        return "B"
    return "C"
''', "    if score > 80:", "    if score >= 80:",
       ("    if score > 80 and score < 90:", "    if 80 < score:"), '''
from grades import letter


def test_a():
    assert letter(95) == "A"


def test_b_edge():
    assert letter(80) == "B"
''', 1),
]}
