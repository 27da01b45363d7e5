"""Everything issue 14 asks of an 8-GPU node, as one script: start-up, the GPU test, scaling, a replica killed.

    # on the GPU node (offline bundle on PYTHONPATH, see docs/GPU.md "Operator run on an 8-GPU node"):
    python3 benchmarks/node_run.py all --fleet gpu --model /models/Qwen3-VL-8B-Instruct --out docs/gpu-runs/8xh200
    # the rehearsal on any machine: 8 simulated replicas, a few clips, same stages, same reports
    python3 benchmarks/node_run.py all --fleet sim --sim-replicas 8 --clips 24 --out /tmp/rehearsal
    # one stage at a time (each reads nothing but the clip cache and writes OUT/<stage>.json):
    python3 benchmarks/node_run.py scaling --fleet gpu --gpus 0,1 --replicas 1,2 --out docs/gpu-runs/2xh200

Stages (`all` runs them in this order; a failed stage is reported and the next one still runs):
  clips    >= --clips distinct realistic clips + the hostile corpus, generated in parallel on every core into
           a cache folder (--clip-cache) and reused by later runs
  launch   ./launch.sh (GPU mode on every GPU, or the simulated fleet) with --detach: the time to "fleet up" and
           to the app answering, and when each replica, the router and the app first answered; then stopped
  gputest  tests/serving/test_gpu_fleet.py with CW_GPU_GPUS=<all GPUs>, CW_GPU_CLIPS=<--clips>, the cached clips
  scaling  clips/s through our runner (serving.runner.run_job, the code behind `python -m serving.caption`)
           with 1, 2, 4, 8 replicas behind vllm-router, NVDEC (pynvvideocodec) and CPU (opencv) decoding side by
           side; machine CPU cores busy (psutil), CPU core-seconds per clip, ratio to 1 replica; the goals
  kill     a caption job over the whole fleet; one replica SIGKILLed (its process group) mid-job; the job must
           finish with 0 clips missing and 0 duplicated captions
  report   table.md (for docs/BENCHMARKS.md) and scaling.png (clips/s vs GPUs, both decoders) from the JSON
Not in `all` (one-GPU measurements of issue 20, one lent-machine call each):
  threads  a fresh replica per CPU budget (--threads-configs: threads per pool, the launcher's budget, pinned, or
           vLLM's own pools), the same clips through our runner against each: clips/s, core-s per clip, cores busy
  workload one replica, a job per frames x pixel budget point (--workload-frames x --workload-pixels): clips/s,
           prompt tokens, compute efficiency; work-per-clip.json and .png for docs/
Every stage that runs replicas on GPUs reports the model FLOPs per clip and the share of the peak (serving.flops;
the peaks measured once per machine by benchmarks/gpu_peak.py).

Everything lands in --out: <stage>.json, logs/<stage>-*.log, table.md, scaling.png. Replica command lines come
from serving.launch.commands.vllm_command (NVIDIA's NVDEC recipe, docs/GPU.md); processes are started in their own
process groups and stopped by group, never by name. With --fleet sim the replicas are `python -m
serving.simfleet --replicas 1` processes (one process group each, so one can be killed like a GPU replica);
the simulator has no video decoder, so the two decoder columns run the same simulator and every report says
so: rehearsal figures say nothing about GPUs.

The command is `python3 benchmarks/node_run.py`; the code is this package, one module per concern:
  context  the options of a run and what they imply (Ctx); stage reports, logged commands, child processes
  clips    the cached clip library, clip roots linked from it, ingest (stage `clips`)
  launch   ./launch.sh timed (stage `launch`)
  gputest  tests/serving/test_gpu_fleet.py on the node (stage `gputest`)
  fleet    replicas started one by one, vllm-router over some of them, the MPS daemon
  jobs     data dirs, caption jobs through our runner, what a job left behind
  cpu      whole-machine CPU time over a job
  scaling  the scaling stage and its goals
  kill     a replica killed mid-job (stage `kill`)
  threads  the CPU budgets side by side (stage `threads`)
  workload the frames x pixels sweep (stage `workload`)
  report   table.md and scaling.png (stage `report`)
  cli      options, preflight, dry run, the stage loop
"""
