"""tpusim: a discrete-event simulator of TPU pods and their training schedules.

The simulator's entry points (run, check, fit, validate, sweep, plan, describe_hardware) come
from the extension tpusim._tpusim, each returning what the command prints as JSON. This file adds
what lives in Python: sweeps whose points run as tasks on a Dask cluster, and pandas frames.
Bad input raises ConfigError (a ValueError) naming the JSON path; a failed simulation raises
RuntimeError; a step that does not fit is a result ("fits": false), not an exception.
"""

from ._tpusim import (ConfigError, check, describe_hardware, fit, run)
from . import _tpusim

__all__ = ["ConfigError", "check", "describe_hardware", "fit", "plan", "run", "sweep", "to_dataframe",
           "validate"]


def _point_record(study, set, spec):
    """One sweep point's record (results.jsonl's line), run where this is called: a Dask task."""
    from tpusim import _tpusim as extension
    return extension._sweep_point(study, set, spec)


def sweep(study, grid, set=None, jobs=1, out=None, client=None):
    """Runs `study` (a file) over the cartesian product of `grid` ({dotted path: [values]}).

    Returns every point's record summary ({index, key, point, result, error}; results.csv's rows),
    in point order; a point that failed is a record with its error, not an exception.
    Without `client`, `jobs` points at a time on this machine, each in its own process (`out`
    keeps sweep's files). With `client` (a dask.distributed.Client), each point is a Dask task
    on the cluster's workers (each runs the tpusim command in a child, so SimGrid's one engine per
    process holds); the study file must be readable on the workers at the same path. Dask
    reschedules the points of a worker that dies.
    """
    if client is None:
        return _tpusim.sweep(study, grid, set=set, jobs=jobs, out=out)
    if out is not None:
        raise ConfigError("out: sweep's files are written by a local sweep only; with client=, "
                          "keep the returned records")
    specs = _tpusim._sweep_points(study, grid, set=set)
    n = len(specs)
    futures = client.map(_point_record, [study] * n, [set] * n, specs, pure=False)
    records = client.gather(futures)
    return [_tpusim._sweep_summary(r) for r in records]


def validate(cases=None, jobs=None, intervals=False, sensitivity=False, hardware_override=None, cases_dir="",
             client=None):
    """Predictions against the measured TPU runs: the dict `tpusim validate --json` prints.

    `cases`: case ids (default: every case of configs/validation); `intervals`, `sensitivity`,
    `hardware_override` (a list of "figure=value") and `cases_dir` as validate's --intervals,
    --sensitivity, --hardware-override and --cases-dir. Without `client`, `jobs` simulations at a
    time on this machine (default 1). With `client` (a dask.distributed.Client), each simulation
    is a Dask task on the cluster's workers (default: as many at once as it has worker threads):
    the same dict as a local run.
    """
    common = dict(intervals=intervals, sensitivity=sensitivity, hardware_override=list(hardware_override or []),
                  cases_dir=cases_dir)
    if client is None:
        return _tpusim.validate(list(cases or []), 1 if jobs is None else jobs, **common)
    return _tpusim.validate(list(cases or []), 0 if jobs is None else jobs, dask=client.scheduler.address,
                            **common)


def plan(study, set=None, space="", jobs=None, top=5, time_limit=0.0, client=None):
    """The fastest schedule that fits: the dict `tpusim plan --json` prints (`best` None: none fits).

    Without `client`, `jobs` simulations at a time on this machine (default 1). With `client` (a
    dask.distributed.Client), each candidate's simulation is a Dask task on the cluster's workers
    (default: as many at once as it has worker threads); the study file must be readable on the
    workers at the same path. The same dict as a local plan.
    """
    if client is None:
        return _tpusim.plan(study, set=set, space=space, jobs=1 if jobs is None else jobs, top=top,
                            time_limit=time_limit)
    return _tpusim.plan(study, set=set, space=space, jobs=0 if jobs is None else jobs, top=top,
                        time_limit=time_limit, dask=client.scheduler.address)


def _flatten(value, prefix, row):
    for name, v in value.items():
        if isinstance(v, dict):
            _flatten(v, prefix + name + ".", row)
        elif not isinstance(v, list):
            row[prefix + name] = v


def to_dataframe(records):
    """A pandas DataFrame of sweep records: one row per point, its swept values, the summary's
    figures (step_time_s, examples_per_s, peak_hbm_bytes, fits, ...; nested ones as dotted names:
    breakdown.exposed_communication_s, compiler_remat.share_of_layers_needed) and its error."""
    import pandas
    rows = []
    for r in records:
        row = {"index": r["index"], "key": r["key"]}
        row.update(r["point"])
        _flatten(r.get("result") or {}, "", row)
        row["error"] = r.get("error")
        rows.append(row)
    return pandas.DataFrame(rows)
