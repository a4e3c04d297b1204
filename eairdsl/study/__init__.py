"""Studies: sweeps over world × model × condition × instance × seed, stored and reported.

* `grid`     — the cells of a study and the seeds their attempts run with;
* `store`    — the SQLite results store (`runs/NAME/results.sqlite`) and exports;
* `executor` — running the grid locally (processes) or on Dask, resumably;
* `stats`    — Wilson intervals, exact McNemar, clustered bootstrap, rank correlations;
* `report`   — the static HTML report with its charts and readable traces.

Import the submodule you need: this package root imports nothing heavy.
"""

from __future__ import annotations

__all__ = ["executor", "grid", "report", "stats", "store"]
