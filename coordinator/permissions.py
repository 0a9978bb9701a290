"""Permission rules: which effect (allow, ask, deny) a tool call gets.

The last matching rule wins, configured rules first and the session's own ``always`` rules after them,
except that a configured ``deny`` always wins over a session rule. With no matching rule a call is
allowed (an empty config runs every tool, as agent servers do by default; shell is made to ask by a
rule, as in the contract's example).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

import attrs

from coordinator.records import Effect, Rule

DEFAULT_EFFECT: Effect = "allow"


@attrs.frozen(kw_only=True)
class Verdict:
    """The effect for one call and the rule that decided it (None: the default)."""

    effect: Effect
    rule: Rule | None
    source: str

    def describe(self) -> str:
        if self.rule is None:
            return "no rule matched"
        return f'{self.source} rule action="{self.rule.action}" resource="{self.rule.resource}" effect={self.effect}'


def matches(rule: Rule, action: str, resource: str) -> bool:
    """Does ``rule`` apply to a call of tool ``action`` on ``resource`` (glob, case-sensitive)?"""
    return (rule.action == "*" or rule.action == action) and fnmatch.fnmatchcase(resource, rule.resource)


def _last_match(rules: Sequence[Rule], action: str, resource: str) -> Rule | None:
    for rule in reversed(rules):
        if matches(rule, action, resource):
            return rule
    return None


def evaluate(
    configured: Sequence[Rule], session_rules: Sequence[Rule], action: str, resource: str
) -> Verdict:
    """The verdict for a call, by the rules above."""
    config_rule = _last_match(configured, action, resource)
    if config_rule is not None and config_rule.effect == "deny":
        return Verdict(effect="deny", rule=config_rule, source="configured")
    session_rule = _last_match(session_rules, action, resource)
    if session_rule is not None:
        return Verdict(effect=session_rule.effect, rule=session_rule, source="session")
    if config_rule is not None:
        return Verdict(effect=config_rule.effect, rule=config_rule, source="configured")
    return Verdict(effect=DEFAULT_EFFECT, rule=None, source="default")


def always_rule(action: str, resource: str) -> Rule:
    """The session rule an ``always`` reply adds: this action on exactly this resource."""
    escaped = "".join(f"[{c}]" if c in "*?[]" else c for c in resource)
    return Rule(action=action, resource=escaped, effect="allow")
