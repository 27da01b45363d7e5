"""The launch wing of serving/: bringing a fleet up and down, `python -m serving.launcher` (README, launch.sh).

- cli.py        the command line: up, down, status, url, owns (serving/launcher.py starts it)
- options.py    the flags of one run beyond the settings (`LaunchOptions`: a dry run, the vLLM version, ...)
- plan.py       what `up` starts, in order, worked out before anything starts (data, printed by a dry run)
- commands.py   each process's command line: `vllm serve` (NVIDIA's recipe), vllm-router, the simulated fleet, CUDA
                MPS; `python -m serving.launch.commands mode` resolves `--fleet-mode auto` for launch.sh
- addresses.py  where the servers listen, free ports, and whether the process on a port is ours
- up.py         starting a plan (or printing it), each process in its own group, recorded as it starts
- record.py     what `up` started, in DATA_DIR/run/fleet.json: read by whatever needs the fleet's URL
- recorded.py   the fleet a record names, from any shell: `down` and `status`

Only this wing starts or stops a fleet. It reads data/ and the rest of serving/ (processes, the fleet readers, the
fleet key); outside it, serving/ and webapp/ read only the record (`record.py`: the runner, `serving.cost`, the
Jobs and Fleet tabs) (tests/test_structure.py).
"""
