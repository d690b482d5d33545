"""Every redaction regex means the same on every Python 3.11 the project supports.

CPython before 3.11.5 matched a possessive repeat of a group (`(?:a:b)*+`, `(?:...)?+`) wrongly (gh-106052,
gh-100061); Debian 12 ships 3.11.2, on which the IPv6 parser once accepted no address with `::`. A possessive
repeat of one character class (`[0-9a-f]{1,4}+`) compiles to a different opcode that was never affected.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from re import _constants as sre  # type: ignore[attr-defined]  # the parser's opcodes (3.11+)
from re import _parser  # type: ignore[attr-defined]
from typing import Any

import evolvable.governance.redaction as redaction

_ONE_CHARACTER = {sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN}


def _possessive_groups(tree: Any) -> list[str]:
    """The possessive repeats in a parsed pattern whose item is more than one character class."""
    found: list[str] = []
    for op, av in tree:
        children: list[Any] = []
        if op == sre.POSSESSIVE_REPEAT:
            item = av[2]
            if len(item) != 1 or item[0][0] not in _ONE_CHARACTER:
                found.append(str(item))
            children = [item]
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            children = [av[2]]
        elif op == sre.SUBPATTERN:
            children = [av[3]]
        elif op == sre.BRANCH:
            children = list(av[1])
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            children = [av[1]]
        elif op == sre.ATOMIC_GROUP:
            children = [av]
        elif op == sre.GROUPREF_EXISTS:
            children = [p for p in av[1:] if p is not None]
        for child in children:
            found += _possessive_groups(child)
    return found


def _redaction_patterns() -> dict[str, re.Pattern[str]]:
    patterns: dict[str, re.Pattern[str]] = {}
    for info in pkgutil.iter_modules(redaction.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{redaction.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                patterns[f"{info.name}.{name}"] = value
    return patterns


def test_the_check_sees_a_possessive_group_and_allows_a_possessive_class() -> None:
    assert _possessive_groups(_parser.parse(r"((?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*+)?+)::"))
    assert not _possessive_groups(_parser.parse(r"[0-9A-Fa-f]{1,4}+:x++(?:ab)*"))


def test_no_redaction_regex_repeats_a_group_possessively() -> None:
    patterns = _redaction_patterns()
    assert len(patterns) > 40  # the recognizers, validators, names, addresses, phones and engine modules
    offenders = {
        name: groups
        for name, p in patterns.items()
        if (groups := _possessive_groups(_parser.parse(p.pattern, p.flags)))
    }
    assert not offenders, offenders


def test_ipv6_with_a_gap_parses_on_this_interpreter() -> None:
    from evolvable.governance.redaction import validators

    assert validators.parses_as_ip("2001:4860:4860::8888") and validators.parses_as_ip("1:db8::0:0:0")
    assert validators.parses_as_ip("::") and not validators.parses_as_ip("1:::2")
