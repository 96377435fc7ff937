"""The duty cycle: how many steps are profiled out of how many, and what
that costs.

Per cycle of ``cycle_steps`` steps, torch.profiler's schedule waits, warms
up for ``warmup_steps`` (profiler on, nothing kept), records
``active_steps``, then the trace is exported on the training thread. The
cost of one cycle, in units of one unprofiled step time ``t``:

    overhead = (warmup_steps * warmup_slowdown
                + active_steps * active_slowdown) * t + export_seconds
    fraction = overhead / (cycle_steps * t)

With the defaults (1 warm-up and 2 recorded steps every 1000 steps) and
pessimistic costs -- a recorded step 50 % slower (CUDA activity tracing,
shapes, no stacks), a warm-up step 10 % slower, 2 s to write and gzip the
trace -- and a short 0.5 s step:

    ((1 * 0.1 + 2 * 0.5) * 0.5 s + 2 s) / (1000 * 0.5 s)
    = (0.55 s + 2 s) / 500 s = 0.51 %

Longer steps only lower it (the export is a fixed cost); a job with
steps under about 0.3 s should raise cycle_steps (fraction is < 1 % as long
as cycle_steps * t > 100 * overhead). Two recorded steps are enough for
bubblewatch: bubbles repeat every step, and two steps show one whole
step boundary.
"""

import collections

DutyCycle = collections.namedtuple(
    "DutyCycle", ["skip_first", "warmup_steps", "active_steps", "cycle_steps"])

# Skip the first 20 steps (compilation, cache warm-up), then profile
# 1 warm-up + 2 recorded steps out of every 1000.
DEFAULT_DUTY_CYCLE = DutyCycle(skip_first=20, warmup_steps=1, active_steps=2,
                               cycle_steps=1000)


def validate(cycle):
    """Raises ValueError unless the cycle makes sense."""
    if cycle.active_steps < 1:
        raise ValueError("active_steps must be >= 1")
    if cycle.warmup_steps < 0 or cycle.skip_first < 0:
        raise ValueError("warmup_steps and skip_first must be >= 0")
    if cycle.cycle_steps < cycle.warmup_steps + cycle.active_steps:
        raise ValueError("cycle_steps must be at least warmup + active steps")


def wait_steps(cycle):
    """The schedule's ``wait``: the unprofiled steps of each cycle."""
    validate(cycle)
    return cycle.cycle_steps - cycle.warmup_steps - cycle.active_steps


def overhead_fraction(cycle=DEFAULT_DUTY_CYCLE, step_seconds=0.5,
                      active_slowdown=0.5, warmup_slowdown=0.1,
                      export_seconds=2.0):
    """The fraction of training time the duty cycle costs (module doc)."""
    validate(cycle)
    if step_seconds <= 0:
        raise ValueError("step_seconds must be positive")
    extra = ((cycle.warmup_steps * warmup_slowdown +
              cycle.active_steps * active_slowdown) * step_seconds +
             export_seconds)
    return extra / (cycle.cycle_steps * step_seconds)


def profiled_steps(cycle, total_steps):
    """Which of steps 0..total_steps-1 are recorded (for tests and docs):
    the same rule as torch.profiler.schedule(skip_first, wait, warmup,
    active, repeat=0)."""
    wait = wait_steps(cycle)
    out = []
    for step in range(cycle.skip_first, total_steps):
        pos = (step - cycle.skip_first) % cycle.cycle_steps
        if pos >= wait + cycle.warmup_steps:
            out.append(step)
    return out
