"""Tests of serving/: the fleet client and readers, the runner, the launcher, the simulated fleet."""
