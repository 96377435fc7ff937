"""The torch.profiler wrapper. Imports torch lazily, so that the rest of the
package (naming, schedule arithmetic) works without it."""

import os
import sys

from bubblewatch_torch import naming
from bubblewatch_torch import schedule as duty


class TorchNotInstalledError(ImportError):
    """profile() was called in a Python that has no torch. An ImportError,
    but not a ModuleNotFoundError: its message says what to install where."""


def _import_torch():
    """Returns the torch module, or raises TorchNotInstalledError if torch is
    not installed. Any other failure to import an installed torch (a broken
    CUDA library, say) propagates as it is: its own message is the useful
    one."""
    try:
        import torch
        import torch.profiler  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "torch" and not (e.name or "").startswith("torch."):
            raise
        # `from None`: one error, not torch's traceback chained before it.
        raise TorchNotInstalledError(
            "bubblewatch_torch.profile() needs PyTorch, which the Python at "
            "%s cannot import. Install it into that environment: "
            "`%s -m pip install torch` (or the build for your CUDA version: "
            "https://pytorch.org/get-started/locally/)"
            % (sys.executable, sys.executable or "python3"),
            name="torch") from None
    return torch


def trace_handler(trace_dir, job, rank):
    """An on_trace_ready callback: exports the trace gzipped under a hidden
    temporary name in ``trace_dir``, then renames it into place, so that the
    watcher only ever sees whole files."""
    job = naming.sanitize_job(job)

    def handler(prof):
        name = naming.trace_file_name(job, rank)
        final = os.path.join(trace_dir, name)
        # Hidden (the watcher skips names starting with '.') and ending in
        # .gz (torch gzips what it exports to such a path).
        tmp = os.path.join(trace_dir, "." + name)
        prof.export_chrome_trace(tmp)
        os.replace(tmp, final)

    return handler


class _Profile(object):
    """torch.profiler.profile with the duty cycle; a context manager whose
    step() is called once per training step."""

    def __init__(self, trace_dir, job=None, rank=None, cycle=None,
                 activities=None, record_shapes=False, with_stack=False):
        torch = _import_torch()  # Deferred: see the module doc.
        from torch.profiler import ProfilerActivity, schedule

        job = job if job is not None else naming.detect_job()
        if job is None:
            raise ValueError(
                "no job id: pass job= or set BUBBLEWATCH_JOB (or run under "
                "torchrun, Slurm or a Kubernetes Job)")
        self.job = naming.sanitize_job(job)
        self.rank = int(rank) if rank is not None else naming.detect_rank()
        self.cycle = cycle or duty.DEFAULT_DUTY_CYCLE
        os.makedirs(trace_dir, exist_ok=True)
        if activities is None:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=schedule(skip_first=self.cycle.skip_first,
                              wait=duty.wait_steps(self.cycle),
                              warmup=self.cycle.warmup_steps,
                              active=self.cycle.active_steps,
                              repeat=0),
            on_trace_ready=trace_handler(trace_dir, self.job, self.rank),
            record_shapes=record_shapes,
            with_stack=with_stack)

    def __enter__(self):
        self._profiler.__enter__()
        return self

    def __exit__(self, *exc):
        return self._profiler.__exit__(*exc)

    def step(self):
        self._profiler.step()
        try:
            from torch.profiler import ProfilerAction
            if self._profiler.current_action in (
                    ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
                # Top-level trace metadata the watcher reads when a file was
                # renamed; only kept while a trace is being recorded.
                self._profiler.add_metadata("bubblewatch_job", self.job)
        except Exception:  # Older torch: the file name still says it.
            pass

    @property
    def profiler(self):
        return self._profiler


def profile(trace_dir, job=None, rank=None, cycle=None, **kwargs):
    """Returns the context manager (see the package doc). ``job`` defaults
    to detect_job(), ``rank`` to detect_rank(), ``cycle`` to
    DEFAULT_DUTY_CYCLE; other keyword arguments go to torch.profiler.
    Raises TorchNotInstalledError (an ImportError) where torch is not
    installed."""
    return _Profile(trace_dir, job=job, rank=rank, cycle=cycle, **kwargs)
