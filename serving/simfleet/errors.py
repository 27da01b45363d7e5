"""vLLM's error answers, word for word where real vLLM 0.25 was recorded giving them.

Every error a simulated replica answers is a `SimError`: HTTP status plus vLLM's body
`{"error": {"message", "type", "param", "code"}}`. The clip-decoding failures below are the texts the NVDEC
(PyNvVideoCodec) backend of vLLM 0.25 gave on an H200 (tests/recordings/vllm-0.25.0-answers.json), so that the client
and runner learn from the simulator exactly what they will meet on a GPU node.
"""

from __future__ import annotations

from pathlib import Path

# vLLM 0.25 with the xgrammar backend, word for word (tests/recordings/vllm-0.25.0-answers.json)
XGRAMMAR_REFUSAL = "The provided JSON schema contains features not supported by xgrammar."


class SimError(Exception):
    """An error answered in vLLM's body shape."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}


def decode_failure(path: Path | str | None) -> SimError:
    """A file the decoder cannot open (HTML named .mp4, random bytes, zero length, a FIFO)."""
    # What vLLM 0.25's NVDEC (PyNvVideoCodec) backend raised for an HTML file named .mp4 on a real H200
    # (docs/gpu-runs/2026-11-30-h200/bench-1-vllm-tails.log): the path is not part of the message.
    return SimError(
        500,
        "CreateFormatContext : \nError code : -1094995529\nError Type : "
        'avformat_open_input(&ctx, szFilePath, NULL, NULL) returned error " Invalid data found when '
        'processing input"\nat /project/src/VideoCodecSDKUtils/helper_classes/Utils/'
        "FFmpegDemuxer.h:792\n",
        "InternalServerError",
    )


def no_video_stream() -> SimError:
    """A container without a video stream (audio only)."""
    # vLLM 0.25 + NVDEC, recorded on an H200 (tests/recordings/vllm-0.25.0-answers.json, "audio_only")
    return SimError(
        500,
        "SimpleDecoder : \nError code : 999\nError Type : SimpleDecoder constructor failed: Could not "
        "find stream in input file\nat /project/src/PyNvVideoCodec/src/SimpleDecoder.cpp:58\n",
        "InternalServerError",
    )


def frames_missing() -> SimError:
    """An MP4 whose index is whole but whose media data is cut short."""
    # vLLM 0.25 + NVDEC: the sampler asks for frames that are not there (recorded, "truncated")
    return SimError(500, "list index out of range", "InternalServerError")
