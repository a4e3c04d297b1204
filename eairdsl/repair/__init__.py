"""The repair stage: stages 2–4 of EAIR §4 and Appendix D.1.

A supported finding's repair plan goes to a Repair Agent, which edits the
world's `.eair` source (never Python); the candidate is compiled before it is
applied, checked against the original's `protected` declarations and the
plan's requirements (ScopeOK), reviewed by an independent Repair Reviewer on
four dimensions (ReviewOK), rerun on a fresh cohort and audited again
(AuditPass, Retain). Accepted exactly when
ScopeOK ∧ ReviewOK ∧ AuditPass ∧ Retain ≥ 0.95.

- `model`: the data that crosses between the loop, the agents and the reviewers,
  and the two one-method protocols (`RepairAgent.propose`, `Reviewer.review`).
- `loop`: `repair(...)`, the rounds and the acceptance decision (`eairc repair`);
  `apply` the guarded apply into a copy of the world folder (`files` what a
  candidate may write there), `scope` ScopeOK, `audited` the audit as a repair
  reads it (once), `retest` the behavioural retest (AuditPass, target, Retain),
  `html` the `review.html` page, `make` the agents and reviewers by name (lazy
  imports).

It imports only earlier stages (audit, study, api, the compiler and the
semantic diff); no earlier stage imports it.
"""
