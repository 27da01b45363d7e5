"""The Quality tab (leads): what a batch is worth and what to do with it, then how good the machine captions are,
measured against what reviewers approved (data.quality does the measuring).

- tab.py       the tab: the report, calibration, prompt versions compared, targets; its layout and wiring
- decision.py  its first region: the decision on a random sample's batch, and "Draw K more"
- plots.py     its figures (matplotlib's object API)
- render.py    the Quality markup, each value escaped; Browse's sample and release panels and the Second review
               tab show their figures with it
"""
