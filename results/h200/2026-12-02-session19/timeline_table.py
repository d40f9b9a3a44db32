"""Session 19 (CPU): the tables of README.md from probe_timeline.py's files. For each timeline-<TRACE>.npz given: per
call, each place's first phase done (the last of its CTAs' stamp 2, us after the launch's first entry) and its SM
group; then each place's median first-phase cycles (stamp 1 to 2) over the calls. A place is a cluster of the plan's
work list (17 places of 8 CTAs for b64-mixed-to-262144: 0 eight solo rows of ~34K, 1 four rows of ~67K on 2 CTAs,
2 3 5 rows of ~133K on 4 CTAs, 4 two rows of ~66K on 2 CTAs, 6-11 rows of 262144 on 8, 12-16 short rows).

    python3 timeline_table.py call13/timeline-1.npz call18/timeline-3.npz ...   (after tar xzf callN/logs.tgz)
"""
import sys

import numpy as np


def main(paths):
    for path in paths:
        d = np.load(path)
        stamps, work = d["stamps"], d["work"].reshape(-1, 8, 2)
        places = work.shape[0]
        print(f"== {path}: first phase done per place (us), the SMs' lowest id in brackets")
        cycles = {}
        for call, s in enumerate(stamps):
            s = s[:places * 8]
            ns, cy = s[:, :, 0], s[:, :, 1]
            origin = ns[ns[:, 0] > 0, 0].min()
            cells = []
            for p in range(places):
                idx = [8 * p + j for j in range(8) if work[p, j, 0] >= 0 and ns[8 * p + j, 2] > 0]
                if not idx:
                    continue
                done = max((ns[i, 2] - origin) / 1e3 for i in idx)
                sm = min(int(s[i, 9, 0]) - 1 for i in idx)
                cells.append(f"{p}:{done:.1f}[{sm}]")
                cycles.setdefault(p, []).extend(int(cy[i, 2] - cy[i, 1]) for i in idx)
            print(f"  call {call}: " + " ".join(cells))
        print("  median first-phase cycles: " + " ".join(f"{p}:{int(np.median(v))}" for p, v in sorted(cycles.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
