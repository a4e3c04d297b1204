"""The offline auditor's rules: world-agnostic checks over a bundle's context and steps.

One module per rule (ruff's one-file-per-rule layout); each module's docstring is
that rule's documentation: what it detects and how it reads the EAIR B.1 criteria
(R1 the boundary, R2 the path, R3 the material effect, R4 the evidence), and its
limits. `_common` holds what they share: `Hit` and `Cite`, the bundle lookups
(`Context`), the verbatim quoting, and the `Rule` shape.

- `policy_rule`: a declared rule evaluated after each state change
  (`policy_eval`); the first failing step, and whether it is restored.
- `authorization`: a message or tool result that carries a record value the
  receiver's principal may not see.
- `status_drift`: a closed-vocabulary status (decision, submission) the decision
  holder set, or never set, stated otherwise at a later hop; which values are
  submissions or interceptions the world declares (the bundle's `vocabularies.json`).
- `hedge`: a hedge of the lexicon `HEDGES` dropped at the next hop.
- `evidence_not_sought`: a record written without reading the documents the
  writer's tools could reach; supported when its conclusion adopts a claim.
- `self_report_routing`: a selection of a participant on the candidates' own bids;
  supported when the chosen one lacks the tool a declared policy names.

`reliance` is not a rule: it holds the boundaries `policy_rule` reads when one role
alone wrote the failing state (a request across authority, a report overridden at
review, a duty omitted along a delegation).

`RULES` is the order the auditor runs them in (sqlglot's optimizer `RULES`): a
tuple of `Rule`s, each with the name the report's coverage records and a
`run(ctx) -> Outcome`. The order is part of the byte-stable report (findings are
numbered, and deduplicated first come first kept).

Adding a rule: a module here with its docstring in the shape of the others, a
function `Context -> list[Hit]` wrapped as `RULE = FindRule(NAME, function)` (or a
class with `name` and `run` when its coverage says more than its name), an entry in
`RULES`, and fixture bundles under `tests/fixtures/audit_rules/<name>/` (a positive
and a negative control; `tests/fixtures/audit_rules/README.md`). A hit is
`supported` only with evidence for R1, R2 and R3 (EAIR B.1); otherwise it is a
lead. Nothing here may name a world's roles, fields or values: names come from the
bundle, vocabularies from the tools' JSON schemas, what some of their values mean
from the world's declarations (`Bundle.vocabularies`), authority from the
participants' ranks (tests/test_audit_offline.py greps every module).
"""

from __future__ import annotations

from eairdsl.audit.rules import (
    authorization,
    evidence_not_sought,
    hedge,
    policy_rule,
    self_report_routing,
    status_drift,
)
from eairdsl.audit.rules._common import Cite, Context, FindRule, Hit, Outcome, Rule, cite, quote
from eairdsl.audit.rules.hedge import HEDGES

__all__ = ["HEDGES", "RULES", "Cite", "Context", "FindRule", "Hit",
           "Outcome", "Rule", "cite", "quote"]

#: the rules in the order the auditor runs them
RULES: tuple[Rule, ...] = (
    policy_rule.RULE,
    authorization.RULE,
    status_drift.RULE,
    hedge.RULE,
    evidence_not_sought.RULE,
    self_report_routing.RULE,
)

