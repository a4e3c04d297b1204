"""External traces in: importers from other frameworks' logs into the project's trace
format, under the input adapter's rules (EAIR §5.6, F.17; docs/external.md).

`core` holds the builder and the registry; one module per source format
registers an `Importer`. The grading against the datasets' labels reads only
the grader side files (`grading`).
"""
