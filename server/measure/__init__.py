"""Measuring tools: `brain-eval` (retrieval quality) and the benchmarks."""
