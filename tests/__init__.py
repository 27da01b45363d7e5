"""The workbench's tests; docs/TESTING.md says which folder holds which kind."""
