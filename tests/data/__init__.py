"""Tests of data/: the core over real SQLite files, no server."""
