"""`python -m serving.simfleet`: run a simulated vLLM fleet (see serving/simfleet/cli.py)."""

import sys

from serving.simfleet.cli import main

sys.exit(main())
