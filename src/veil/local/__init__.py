"""Local differential privacy: noise added to each record on its own, before anything is
aggregated.

- :mod:`veil.local.perturb` — :func:`veil.perturb`, a noisy copy of a table's columns (numeric
  columns by the grid Laplace mechanism, categories by randomized response, locations by
  :mod:`veil.local.geo`), on DuckDB, Arrow or Spark, charged like any release.
- :mod:`veil.local.geo` — geo-indistinguishable points and a private choice of region.

The package exports nothing itself (``import veil.local`` loads no engine): import the module
you use.
"""
