"""The web app: Gradio mounted in FastAPI (`python -m webapp`). A package per tab (browse/, review/, second_review/,
jobs/, quality/, fleet/), login/ and routes/, and at the top what every tab shares; docs/ARCHITECTURE.md, "The
floors", says what each holds and may import."""
