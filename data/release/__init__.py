"""Training-set releases: the release wing of data/. What was approved, split so that no drive leaks from train
into test, written as the files trainers read, with a dataset card whose figures are measured.

    python -m data.release --data-dir var --out /data/releases/av-hazard-v1 --name av-hazard

- make.py         the release, step by step (`release`), a release's row (`get`), its summary, the command
- options.py      what a release holds and how it is split (`Options`), checked before anything is read
- placement.py    which split each clip goes to, steps 1 and 2 in SQLite: each clip's group (one per drive), the
                  groups an earlier version placed kept where they were, the new ones placed by stratify.py
- stratify.py     the rule that places a new group: whole groups, each split's hazard-level mix like the whole
                  set's, its size near its asked share (the `--splits` shares are read here)
- size_search.py  the heavy groups that decide the sizes, placed by a search (stratify.py places the rest)
- changes.py      the release before of the same name (its manifest) and what changed since
- records.py      step 3: the clips' records streamed to their splits' files and counted for the card
- files.py        the files, one writer per split: manifest, JSONL, Parquet, Qwen's SFT, the messages format
- media.py        `--media copy|link`: the clips placed under the release
- meta.py         what trainers' tools read before the rows: the Hugging Face header, LLaMA-Factory's files
- out.py          where a release is written: its folder checked, a staging folder beside it, the move
- batches.py      the batches (jobs) a release draws from, each with its Quality decision
- card.py         the dataset card: what the set holds, counted, and what its labels are worth, measured
- card_method.py  the card's sections on how the release was made and how each trainer's tool reads it
- card_text.py    the card's Markdown pieces: user and fleet text made inert, shares, tables
- __main__.py     `python -m data.release`

The wing reads the core of data/ and the quality wing (a card reports the Quality figures); nothing else in data/
imports it (tests/test_structure.py).
"""
