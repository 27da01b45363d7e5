"""The Browse tab: filters, full-text search, sort, pages of thumbnails, live counts; and the lead's panels that act
on the clips of the current filter.

- tab.py        the tab: the filter, the grid and its pages, the export links; its layout and wiring
- assigning.py  the assign panel (give the filter's clips to a person, take them back), and its one-clip form that
                Review shows (`ClipAssign`)
- sampling.py   the random review sample panel: draw, assign, send to a blind second review
- release.py    the "Release a training set" panel (data.release), beside the export links
"""
