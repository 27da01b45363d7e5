"""The plain routes beside Gradio's queue, mounted by webapp.app:

- media.py     a clip, its thumbnail and its filmstrip, by clip id (and a signed URL's clip for a GPU node)
- activity.py  the review page's background calls: a person's unsaved edit (drafts), and that they are still on
               a clip (their review lease renewed)
- exports.py   the current filter's clips as a download (leads)
"""
