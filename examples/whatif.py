"""A what-if in a few lines: sweep a study's batch on the simulator and plot step time and peak
HBM per device against it, with the device's usable HBM as a line.

    PYTHONPATH=build/python python3 examples/whatif.py [STUDY] [OUT.png] [--dask ADDRESS]

With --dask, the points run on that Dask scheduler's workers (`dask scheduler` on one machine,
`dask worker ADDRESS` on the others; the study must be readable at the same path on each).
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")  # a file, no display
import matplotlib.pyplot as plt  # noqa: E402
import tpusim  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", nargs="?", default=os.path.join(ROOT, "configs", "studies", "default.json"))
    parser.add_argument("out", nargs="?", default="whatif.png")
    parser.add_argument("--dask", help="a Dask scheduler's address, e.g. tcp://host:8786")
    args = parser.parse_args()

    grid = {"batch": [64, 128, 256, 512, 1024, 2048]}
    if args.dask:
        from dask.distributed import Client
        with Client(args.dask) as client:
            records = tpusim.sweep(args.study, grid, client=client)
    else:
        records = tpusim.sweep(args.study, grid, jobs=2)
    frame = tpusim.to_dataframe(records)
    ok = frame[frame["error"].isna()]

    fig, (time_ax, hbm_ax) = plt.subplots(1, 2, figsize=(10, 4))
    fits = ok[ok["fits"]]
    over = ok[~ok["fits"]]
    time_ax.plot(ok["batch"], ok["step_time_s"] * 1e3, color="#4e79a7")
    time_ax.scatter(fits["batch"], fits["step_time_s"] * 1e3, color="#4e79a7", label="fits")
    time_ax.scatter(over["batch"], over["step_time_s"] * 1e3, facecolors="none", edgecolors="#e15759",
                    label="does not fit")
    if "compiler_remat.share_of_layers_needed" in ok:
        remat = ok[ok["compiler_remat.share_of_layers_needed"].notna()]
        time_ax.scatter(remat["batch"], remat["step_time_s"] * 1e3, marker="x", color="black", zorder=3,
                        label="fits once re-materialized by the compiler")
    time_ax.set(xscale="log", xlabel="global batch", ylabel="step time (ms)", title="step time")
    time_ax.legend()
    hbm_ax.plot(ok["batch"], ok["peak_hbm_bytes"] / 2**30, marker="o", color="#59a14f")
    hbm_ax.axhline(ok["hbm_capacity_bytes"].max() / 2**30, color="#e15759", linestyle="--", label="usable HBM")
    hbm_ax.set(xscale="log", xlabel="global batch", ylabel="GiB per device", title="peak HBM")
    hbm_ax.legend()
    fig.suptitle(os.path.basename(args.study))
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"{args.out}: {len(ok)} points, {len(fits)} fit")


if __name__ == "__main__":
    main()
