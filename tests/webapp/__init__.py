"""Tests of webapp/ over HTTP and in-process, without a browser."""
