"""The Jobs tab (leads): start a captioning job, watch it, pause, resume or cancel it, retry its failures.

- tab.py           the tab: its layout and the wiring of its events; the regions below are its parts
- start.py         the start form: the clips, the prompt version, the work per clip, the preview, Start
- fields.py        the form's job parameters, one input per `data.job_params.JobParams` field
- control.py       the job shown and its buttons (Pause, Resume, Cancel, Retry failed)
- progress.py      the runner's line, the job list, the job shown with its notices (a timer over SQLite)
- prompts.py       the prompt versions panel: a new version, and a run on the clips with an approved caption
- fleet_notice.py  what the runners' heartbeats say about the fleet (the Fleet tab says it too)
- render.py        the tab's markup, each value escaped
"""
