"""The serving floor: everything that talks to the fleet (the client, the runner, the router gate, the fleet key, the
answer checks) and its wings (launch/, fleet/, runner/, simfleet/); docs/ARCHITECTURE.md, "The floors", says what
each holds and may import."""
