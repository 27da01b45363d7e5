"""The Second review tab: a person answers the blind second reviews a lead sent them (data.quality.second_review).

- tab.py  the tab: the task's clip alone (no caption, nothing of the first review), the form, the answer
"""
