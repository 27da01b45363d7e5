"""The Fleet tab: replica health and load from their /metrics, the router's status, the simulated-fleet banner.

- tab.py     the tab and its reads (through the app's serving.fleet.reader.FleetReader), cached, bounded
- render.py  its markup, each value escaped
"""
