"""tpusim: a discrete-event simulator of TPU pods and their training schedules.

The simulator's entry points (run, check, fit, validate, sweep, plan, describe_hardware) come
from the extension tpusim._tpusim, each returning what the command prints as JSON. This file adds
what lives in Python: sweeps whose points run as tasks on a Dask cluster, and pandas frames.
Bad input raises ConfigError (a ValueError) naming the JSON path; a failed simulation raises
RuntimeError; a step that does not fit is a result ("fits": false), not an exception.
"""

import os
import uuid

from ._tpusim import (ConfigError, describe_hardware)
from . import _tpusim

__all__ = ["ConfigError", "check", "describe_hardware", "fit", "plan", "run", "sweep", "to_dataframe",
           "validate"]


def _path(study, name="study"):
    """A study file's path as the extension takes it: a str, or any os.PathLike (pathlib.Path)."""
    if isinstance(study, os.PathLike):
        return os.fspath(study)
    if not isinstance(study, str):
        raise ConfigError("%s: found %r, expected a study file's path (a str or a pathlib.Path)" % (name, study))
    return study


def _names(values, name):
    """A list of strings: one str is a list of one (not its characters)."""
    if values is None:
        return []
    if isinstance(values, (str, os.PathLike)):
        return [os.fspath(values)]
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ConfigError("%s[%d]: found %r, expected a str" % (name, i, v))
    return values


def _client_address(client):
    """The scheduler's address of a dask.distributed Client, or ConfigError naming `client`."""
    if not hasattr(client, "scheduler") or not hasattr(client, "map"):
        raise ConfigError("client: found %r, expected a dask.distributed.Client (or None)" % (client,))
    if getattr(client, "status", "running") in ("closed", "closing"):
        raise ConfigError("client: found a closed Client, expected a connected dask.distributed.Client")
    return client.scheduler.address


def run(study, set=None):
    """Simulates one training step: the dict `tpusim run --json` prints. `study` is a path or a
    dict; `set` a dict of dotted paths to values (as --set)."""
    return _tpusim.run(study if isinstance(study, dict) else _path(study), set=set)


def check(study, set=None):
    """Validates a study file: what `tpusim check` prints after 'ok', or ConfigError naming the problem."""
    return _tpusim.check(_path(study), set=set)


def fit(study, maximize, set=None, min=None, max=None, step=None):
    """The largest value of a numeric field that fits: the dict `tpusim fit --json` prints."""
    if not isinstance(maximize, str):
        raise ConfigError("maximize: found %r, expected a dotted path such as \"model.layers\"" % (maximize,))
    return _tpusim.fit(_path(study), maximize, set=set, min=min, max=max, step=step)


def _point_record(study, set, spec, token=""):
    """One sweep point's record (results.jsonl's line), run where this is called: a Dask task.
    Its child stops when the sweep `token` is cancelled on this worker (_cancel_points)."""
    from tpusim import _tpusim as extension
    return extension._sweep_point(study, set, spec, token)


def _cancel_points(token):
    """Run on every worker (Client.run): stops the running points of the sweep `token` there."""
    from tpusim import _tpusim as extension
    extension._cancel_points(token)


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
    study = _path(study)
    if client is None:
        return _tpusim.sweep(study, grid, set=set, jobs=jobs, out=None if out is None else os.fspath(out))
    _client_address(client)
    if out is not None:
        raise ConfigError("out: sweep's files are written by a local sweep only; with client=, "
                          "keep the returned records")
    specs = _tpusim._sweep_points(study, grid, set=set)
    n = len(specs)
    token = uuid.uuid4().hex
    futures = client.map(_point_record, [study] * n, [set] * n, specs, [token] * n, pure=False)
    try:
        records = client.gather(futures)
    except KeyboardInterrupt:
        client.cancel(futures)  # the points not started are dropped,
        client.run(_cancel_points, token)  # the running ones stop their children
        raise
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
    common = dict(intervals=intervals, sensitivity=sensitivity,
                  hardware_override=_names(hardware_override, "hardware_override"), cases_dir=os.fspath(cases_dir))
    cases = _names(cases, "cases")
    if client is None:
        return _tpusim.validate(cases, 1 if jobs is None else jobs, **common)
    return _tpusim.validate(cases, 0 if jobs is None else jobs, dask=_client_address(client), **common)


def plan(study, set=None, space="", jobs=None, top=5, time_limit=0.0, client=None):
    """The fastest schedule that fits: the dict `tpusim plan --json` prints (`best` None: none fits).

    Without `client`, `jobs` simulations at a time on this machine (default 1). With `client` (a
    dask.distributed.Client), each candidate's simulation is a Dask task on the cluster's workers
    (default: as many at once as it has worker threads); the study file must be readable on the
    workers at the same path. The same dict as a local plan.
    """
    study, space = _path(study), os.fspath(space)
    if client is None:
        return _tpusim.plan(study, set=set, space=space, jobs=1 if jobs is None else jobs, top=top,
                            time_limit=time_limit)
    return _tpusim.plan(study, set=set, space=space, jobs=0 if jobs is None else jobs, top=top,
                        time_limit=time_limit, dask=_client_address(client))


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
