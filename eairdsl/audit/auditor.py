"""The Auditor Agent protocol: a sanitized bundle in, a contract-v1 report out.

Like the episode agents (one method, `decide`), an auditor is anything with one
method, `audit(bundle) -> Report`. The offline rules auditor, the grader-side
oracle and the LLM auditor all implement it, so `eairc audit` and the audit
study drive them the same way and never know which one they hold. An auditor
sees only the bundle: it is given no trace path, no world source and no study
store (EAIR §4: the Auditor reconstructs the failure from the record, not from
how the experiment was designed or scored). The oracle is the one exception
and says so: it is built with the grader's witness steps, never as an arm of
the audit study.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from eairdsl.audit.contract import Report
from eairdsl.audit.evidence import Bundle

__all__ = ["AuditorAgent", "AuditError"]


class AuditError(RuntimeError):
    """An audit that could not produce a report (provider failure, budget spent, …).

    The runner records it beside the episode instead of a report; it never
    becomes an empty or clean report.
    """


@runtime_checkable
class AuditorAgent(Protocol):
    """Reads one bundle and returns one report (contract v1)."""

    def audit(self, bundle: Bundle) -> Report:  # pragma: no cover - protocol
        ...
