"""The fleet readers: the one home of every read of a fleet's own state (its health, load and workers).

- reader.py   `FleetReader`, the one way to read a fleet: every read with the data dir's fleet key, bounded in
              bytes, time and fan-out (the runner's look, the Fleet tab, the Jobs form's cost line, the launcher's
              health checks and `status`)
- health.py   what the answers mean: each replica's `/health` and Prometheus `/metrics`, a router's status
- tls.py      the TLS context every client of the fleet verifies with (the captioning client's too)

The readers send no work and start nothing: they import data/ and serving/'s shared pieces (bounded reads, the
fleet key, redaction), never the launch wing or the runner (tests/test_structure.py). The fleet key itself
(serving.fleet_key) stays beside the other talkers of the fleet: the client and the router gate carry it too.
"""
