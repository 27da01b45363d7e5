"""Every module marked `browser`: a real Chromium through Playwright, run one at a time."""
