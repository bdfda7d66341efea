"""Pack a folder that gen_cases.py (shared opcases) or gen_netcases.py wrote into the two
files the differential test reads: ``cases.json`` and ``cases.npz``.

Usage: python pack_cases.py SRC DST
``cases.npz`` holds per case ``<id>/predict_net`` and ``<id>/init_net`` (the .pb files' bytes
as uint8) and ``<id>/input/<blob>``, ``<id>/blob/<output>`` (``param/`` arrays are dropped:
the init net holds them). A case with ``files`` reuses another case's arrays.
"""

import json
import sys
from pathlib import Path

import numpy as np

KEEP = ("id", "op", "ops", "args", "data", "params", "outputs", "order", "caffe2",
        "caffe2_error", "failed_index", "input_format", "files", "note")


def main(src, dst):
    src, dst = Path(src), Path(dst)
    meta = json.loads((src / "cases.json").read_text())
    cases, arrays = [], {}
    for case in meta["cases"]:
        cases.append({k: case[k] for k in KEEP if k in case})
        if "files" in case:
            continue
        cid = case["id"]
        for name in ("predict_net", "init_net"):
            arrays[f"{cid}/{name}"] = np.frombuffer((src / f"{cid}_{name}.pb").read_bytes(),
                                                    np.uint8)
        with np.load(src / f"{cid}.npz") as stored:
            arrays.update({f"{cid}/{k}": stored[k] for k in stored.files
                           if not k.startswith("param/")})
    out = {"source": f"the real Caffe2: {meta['generator']} seed {meta['seed']}",
           "environment": meta["environment"], "cases": cases}
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "cases.json").write_text(json.dumps(out, indent=0) + "\n")
    np.savez_compressed(dst / "cases.npz", **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:])
