"""Tests of benchmarks/: what the benchmark scripts build and report, checked without a GPU."""
