"""Footage in: the library wing of data/. Everything between a folder of video files and rows in `clips`.

- clip_root.py   where the library's clips are: the clip root recorded at ingest (`python -m data.library`)
- deployment.py  where the fleet's replicas fetch clips from: a head's media base (`python -m data.deployment`)
- ingest.py      scan a clip root, probe, hash, thumbnail, filmstrip, write the rows (`python -m data.ingest`)
- walk.py        the scan of a clip root: the files and their sidecars, bounded
- worker_pool.py probing in worker processes with a timeout and a memory cap (PyAV can crash on hostile input)
- probe.py       opening a clip as the decoder would: metadata, exact frame counts, the mp4 structure
- media.py       thumbnails and filmstrips: exactly the frames the model sees
- clipgen.py     writing video (demo and test clips, with PyAV's bundled encoder)
- demo.py        the demo library a first `./launch.sh` makes (`python -m data.demo`)
- hostile.py     the corpus of bad files that ingest and the fleet must refuse with a reason

The wing imports only the core of data/ (db, errors, events, limits, settings), and nothing else in data/ imports
it (tests/test_structure.py). `python -m data.ingest`, `python -m data.demo` and `python -m data.deployment`, the
commands users type, are the small launchers beside this package.
"""
