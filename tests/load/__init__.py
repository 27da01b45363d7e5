"""Every module with a test marked `load`, `serial` or `slow`: fault runs under load and tests that watch
the machine, run one at a time (tests/run.sh's second part)."""
