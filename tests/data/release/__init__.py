"""Tests of data/release/: training-set releases."""
