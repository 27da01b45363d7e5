"""`python -m data.library show|move-root`: where the library's clips are (data.library.clip_root)."""

import sys

from data.library.clip_root import main

sys.exit(main())
