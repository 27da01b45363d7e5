"""The Review tab: watch one clip, edit its caption and labels, approve or reject, walk the filter; nothing typed is
ever dropped. Built from parts, each given what it uses (docs/ARCHITECTURE.md, "How a tab is built"):

- tab.py        the tab: makes the parts, lays them out, wires their events
- view.py       every region, the input and output lists the handlers share, what fills the regions for a clip
                (the history a page at a time, blind mode, the draft offer)
- form.py       the review form as a handler receives it: which clip, the versions it came from, what is typed
- saves.py      how the form becomes a caption version (a save, the save before a clip is left)
- actions.py    save, approve, reject, broken, adopt, re-caption, the walk through the filter and the queue
- conflicts.py  what a refusal shows; a caption conflict and its three ways out
- drafts.py     the draft offer: an unsaved edit restored, discarded or offered again
"""
