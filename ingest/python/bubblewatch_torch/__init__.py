"""bubblewatch_torch: a profiling duty cycle for PyTorch training jobs.

Wraps ``torch.profiler`` with a schedule that records a few steps out of
every ``cycle_steps`` and writes each trace, gzipped and named with the job
and rank, into the directory that ``bubblewatch produce --watch`` follows:

    import bubblewatch_torch
    with bubblewatch_torch.profile("/var/spool/bubblewatch/traces") as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

File names are ``<job>.rank<rank>.<epoch_ms>.pt.trace.json.gz``, which the
watcher's default ``--job-from-name`` pattern reads. A trace first goes to a
hidden temporary name in the same directory and is then renamed, so the
watcher never sees a half-written file.

The default schedule keeps the overhead under 1 %; see ``overhead_fraction``
for the arithmetic. Only ``profile`` needs torch; the rest is pure Python,
and importing the package never imports torch. ``profile`` without torch
raises ``TorchNotInstalledError`` (an ImportError) saying what to install.
"""

from bubblewatch_torch._version import __version__  # noqa: F401

from bubblewatch_torch.naming import (  # noqa: F401
    DEFAULT_JOB_PATTERN,
    detect_job,
    detect_rank,
    sanitize_job,
    trace_file_name,
)
from bubblewatch_torch.schedule import (  # noqa: F401
    DutyCycle,
    DEFAULT_DUTY_CYCLE,
    overhead_fraction,
)
from bubblewatch_torch.profiler import (  # noqa: F401
    TorchNotInstalledError,
    profile,
    trace_handler,
)
