"""The permission rule order: last match wins, session rules after configured ones, a configured deny
over everything."""

from __future__ import annotations

from coordinator.permissions import always_rule, evaluate
from coordinator.records import Rule

ALLOW_ALL = Rule(action="*", resource="*", effect="allow")
ASK_SHELL = Rule(action="shell", resource="*", effect="ask")
DENY_RM = Rule(action="shell", resource="rm *", effect="deny")


def test_the_last_matching_configured_rule_wins() -> None:
    """Rules read top to bottom, the bottom one deciding, as the contract's config example says."""
    assert evaluate([ALLOW_ALL, ASK_SHELL], [], "shell", "ls").effect == "ask"
    assert evaluate([ASK_SHELL, ALLOW_ALL], [], "shell", "ls").effect == "allow"


def test_no_matching_rule_allows() -> None:
    assert evaluate([ASK_SHELL], [], "question", "*").effect == "allow"


def test_an_always_rule_answers_what_the_configuration_would_ask() -> None:
    """That is what ``always`` is for: the same call does not ask again in this session."""
    verdict = evaluate([ALLOW_ALL, ASK_SHELL], [always_rule("shell", "ls -l")], "shell", "ls -l")
    assert (verdict.effect, verdict.source) == ("allow", "session")


def test_a_configured_deny_beats_a_session_rule_for_the_same_call() -> None:
    """A session's ``always`` never reopens what the operator forbids."""
    verdict = evaluate(
        [ALLOW_ALL, ASK_SHELL, DENY_RM], [always_rule("shell", "rm -rf x")], "shell", "rm -rf x"
    )
    assert (verdict.effect, verdict.source) == ("deny", "configured")


def test_an_always_rule_covers_exactly_its_resource() -> None:
    """Glob characters in the answered command are literal: ``always`` for ``ls *`` is not for ``ls x``."""
    rule = always_rule("shell", "ls *")
    assert evaluate([ASK_SHELL], [rule], "shell", "ls *").effect == "allow"
    assert evaluate([ASK_SHELL], [rule], "shell", "ls x").effect == "ask"
