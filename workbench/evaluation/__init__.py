"""Measuring strategies on judged queries: metrics, query-set loaders, runs, sweeps."""
