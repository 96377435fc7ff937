"""Trace file names the watcher can read the job and rank from."""

import os
import re
import time

# The watcher's default --job-from-name pattern (ingest/watch/job_name_pattern.h),
# in Python's spelling of named groups.
DEFAULT_JOB_PATTERN = r"(?P<job>[A-Za-z0-9_-]+)\.rank(?P<rank>\d+)\."

_NOT_JOB_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def sanitize_job(job):
    """Maps a job id to the characters the default pattern accepts.

    Anything else (dots, slashes, spaces, ...) becomes '-', so that the
    job part of the name stays one unambiguous token.
    """
    cleaned = _NOT_JOB_CHARS.sub("-", str(job)).strip("-")
    if not cleaned:
        raise ValueError("job id %r has no usable characters" % (job,))
    return cleaned


def trace_file_name(job, rank, when_ms=None):
    """'<job>.rank<rank>.<epoch_ms>.pt.trace.json.gz'."""
    if int(rank) < 0:
        raise ValueError("rank must be >= 0, not %r" % (rank,))
    if when_ms is None:
        when_ms = int(time.time() * 1000)
    return "%s.rank%d.%d.pt.trace.json.gz" % (sanitize_job(job), int(rank),
                                              int(when_ms))


def detect_job(environ=None):
    """The job id from the environment, or None.

    BUBBLEWATCH_JOB wins; then the launcher's ids: TORCHELASTIC_RUN_ID
    (torchrun), SLURM_JOB_ID, then a Kubernetes JOB_NAME.
    """
    env = os.environ if environ is None else environ
    for key in ("BUBBLEWATCH_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                "JOB_NAME"):
        value = env.get(key)
        if value and value != "none":
            return value
    return None


def detect_rank(environ=None):
    """The global rank from the environment (RANK, SLURM_PROCID), else 0."""
    env = os.environ if environ is None else environ
    for key in ("RANK", "SLURM_PROCID"):
        value = env.get(key)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0
