"""The audit stage: what an Auditor Agent may see of an episode, and how its report is checked.

EAIR §4 starts the diagnosis-and-repair loop from a *sanitized* workflow record
and ends it in realization certificates that a mechanical validator checks
before anything else. This package holds both ends:

- `evidence`: the bundle's on-disk layout and the one rendering of a step's
  fields that both the query API (what an auditor reads) and the validator
  (what a quote is compared with) use;
- `bundle`: trace + compiled world -> a sanitized bundle;
- `graph` and `query`: the interaction graph and the query API over a bundle;
- `contract` and `validate`: report contract v1 and its strict validator.

It imports only earlier stages (the runtime's trace model, the IR, the study
store); no earlier stage imports it.
"""
