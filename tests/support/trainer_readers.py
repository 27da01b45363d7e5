"""The readers of the fine-tuning tools a release is for, ported from their source so that the tests check a
release's files against each tool's own rules (the tools themselves do not install beside this project: both pin
torch, and LLaMA-Factory pins gradio<=5.50 and datasets<=4.0, ms-swift datasets<4.8.5). Each function does what
the named source does with an item, and raises ValueError where the tool would refuse or drop it.

- Qwen-VL: QwenLM/Qwen3-VL, qwen-vl-finetune/qwenvl/data/data_processor.py, `_build_messages`
  (https://github.com/QwenLM/Qwen3-VL/blob/main/qwen-vl-finetune/qwenvl/data/data_processor.py).
- LLaMA-Factory: hiyouga/LLaMA-Factory, src/llamafactory/data/parser.py (`get_dataset_list`: dataset_info.json),
  loader.py (a local file through `datasets.load_dataset("json", ...)`), converter.py
  (`SharegptDatasetConverter.__call__`, `DatasetConverter._find_medias`), mm_plugin.py (`_validate_messages`)
  (https://github.com/hiyouga/LLaMA-Factory/tree/main/src/llamafactory/data). `media_dir` defaults to
  `dataset_dir` (hparams/data_args.py).
- ms-swift: modelscope/ms-swift, swift/llm/dataset/preprocessor/core.py (`RowPreprocessor.check_messages`,
  `MessagesPreprocessor`), swift/llm/template/vision_utils.py (`load_file`: a relative path is opened from the
  working directory) (https://github.com/modelscope/ms-swift/tree/main/swift/llm).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}


def qwen_messages(item: dict, data_path: str) -> list[dict]:
    """Qwen3-VL's `_build_messages`: media pools from `image` / `video` (a path or a list) made absolute against
    `data_path`; each turn from `human` is the user (split on `<image>` / `<video>`, each taking the next medium),
    any other the assistant; a placeholder beyond the media, or a medium left unused, raises."""
    images = item.get("image") or []
    images = [images] if isinstance(images, str) else images
    videos = item.get("video") or []
    videos = [videos] if isinstance(videos, str) else videos
    base = Path(data_path)
    image_pool = [{"type": "image", "image": str((base / x).resolve())} for x in images]
    video_pool = [{"type": "video", "video": str((base / x).resolve())} for x in videos]
    messages = []
    for turn in item["conversations"]:
        role = "user" if turn["from"] == "human" else "assistant"
        text = turn["value"]
        if role == "user":
            content = []
            for seg in re.split(r"(<image>|<video>)", text):
                if seg == "<image>":
                    if not image_pool:
                        raise ValueError("Number of <image> placeholders exceeds the number of provided images")
                    content.append(image_pool.pop(0))
                elif seg == "<video>":
                    if not video_pool:
                        raise ValueError("Number of <video> placeholders exceeds the number of provided videos")
                    content.append(video_pool.pop(0))
                elif seg.strip():
                    content.append({"type": "text", "text": seg.strip()})
            messages.append({"role": role, "content": content})
        else:
            messages.append({"role": role, "content": [{"type": "text", "text": text}]})
    if image_pool or video_pool:
        raise ValueError("media remain unused (not consumed by placeholders)")
    return messages


def llamafactory_examples(dataset_dir: str, name: str, cache_dir: str, media_dir: str | None = None) -> list[dict]:
    """LLaMA-Factory's reading of dataset `name` from `dataset_dir`/dataset_info.json in the sharegpt formatting,
    each example as its converter leaves it (`_system`, `_prompt`, `_response`, `_videos`), checked as its
    multimodal plugin checks it (placeholders against media)."""
    import datasets

    with open(os.path.join(dataset_dir, "dataset_info.json")) as fh:
        info = json.load(fh)
    if name not in info:
        raise ValueError(f"Undefined dataset {name} in dataset_info.json.")
    entry = info[name]
    if "hf_hub_url" in entry or "ms_hub_url" in entry or "script_url" in entry:
        raise ValueError("not a local file")
    if entry.get("formatting", "alpaca") != "sharegpt":
        raise ValueError("not the sharegpt formatting")
    columns = {"messages": "conversations", "system": None, "images": None, "videos": None, "audios": None}
    columns.update({k: v for k, v in entry.get("columns", {}).items()})
    tags = {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "observation_tag": "observation",
        "function_tag": "function_call",
        "system_tag": "system",
    }
    tags.update(entry.get("tags", {}))
    local = os.path.join(dataset_dir, entry["file_name"])
    ext = os.path.splitext(local)[1].lstrip(".")
    builder = {"json": "json", "jsonl": "json", "parquet": "parquet", "csv": "csv", "arrow": "arrow"}[ext]
    rows = datasets.load_dataset(builder, data_files=[local], split="train", cache_dir=cache_dir)
    media_dir = media_dir or dataset_dir
    odd, even = (tags["user_tag"], tags["observation_tag"]), (tags["assistant_tag"], tags["function_tag"])
    mapping = {
        tags["user_tag"]: "user",
        tags["assistant_tag"]: "assistant",
        tags["observation_tag"]: "observation",
        tags["function_tag"]: "function",
        tags["system_tag"]: "system",
    }
    out = []
    for example in rows:
        messages = example[columns["messages"]]
        if tags["system_tag"] and messages and messages[0][tags["role_tag"]] == tags["system_tag"]:
            system = messages[0][tags["content_tag"]]
            messages = messages[1:]
        else:
            system = example[columns["system"]] if columns["system"] else ""
        aligned = []
        for i, message in enumerate(messages):
            if message[tags["role_tag"]] not in (odd, even)[i % 2]:
                raise ValueError(f"Invalid role tag in {messages}.")
            aligned.append({"role": mapping[message[tags["role_tag"]]], "content": message[tags["content_tag"]]})
        if len(aligned) % 2 != 0:
            raise ValueError(f"Invalid message count in {messages}.")
        videos = example[columns["videos"]] if columns["videos"] else None
        videos = None if videos is None else ([videos] if not isinstance(videos, list) else list(videos))
        found = []
        for v in videos or []:
            path = os.path.join(media_dir, v)
            found.append(path if os.path.isfile(path) else v)  # the tool warns and keeps the path as written
        for kind, tag in PLACEHOLDERS.items():
            n = sum(m["content"].count(tag) for m in aligned)
            have = len(found) if kind == "video" else 0
            if n != have:
                raise ValueError(f"The number of {kind}s does not match the number of {tag} tokens in {aligned}.")
        out.append({"_system": system, "_prompt": aligned[:-1], "_response": aligned[-1:], "_videos": found})
    return out


def swift_check(row: dict, cwd: str) -> list[str]:
    """ms-swift's checks of a row of its standard format: `messages` (a system message first, if any; then user
    and assistant in turn, an assistant's content never empty), as many `<video>` tags as `videos`; returns the
    videos as it opens them (relative to the working directory `cwd`)."""
    messages = row["messages"]
    if not messages:
        raise ValueError(f"messages: {messages}")
    if messages[0]["role"] == "system":
        messages = messages[1:]
    if len(messages) % 2:
        raise ValueError(f"The messages length is not even: {messages}")
    for user, assistant in zip(messages[::2], messages[1::2]):
        if user["role"] not in {"user", "tool"} or user.get("content") is None:
            raise ValueError(f"user_message: {user}")
        if assistant["role"] != "assistant" or assistant.get("content") in {"", None}:
            raise ValueError(f"assistant_message: {assistant}")
    videos = row.get("videos") or []
    videos = [videos] if isinstance(videos, str) else videos
    for kind, tag in PLACEHOLDERS.items():
        n = sum(m["content"].count(tag) for m in row["messages"])
        if n > (len(videos) if kind == "video" else 0):
            raise ValueError(f"{n} {tag} tags for {len(videos)} {kind}s")
    return [os.path.abspath(os.path.join(cwd, v)) for v in videos]
