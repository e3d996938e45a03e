"""Benchmarks of SPEC §11: each figure is a ratio of two timings taken in the same run.

``python -m bench [--quick]`` runs them all and rewrites ``bench/RESULTS.md``.
"""
