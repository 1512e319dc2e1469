"""Independent reference orders for tests (not the library): GPipe and Megatron-style 1F1B."""
from flexpipe_ui import Schedule


def gpipe_rows(p, m, split=False):
    rows = []
    for r in range(p):
        bwd = [x for i in range(m) for x in ((f"{r}I{i}", f"{r}W{i}") if split else (f"{r}B{i}",))]
        rows.append([f"{r}F{i}" for i in range(m)] + bwd)
    return rows


def onef1b_rows(p, m):
    """Megatron 1F1B: p-r-1 warm-up forwards, then one forward / one backward, then cool-down."""
    rows = []
    for r in range(p):
        warm = min(p - r - 1, m)
        row = [f"{r}F{i}" for i in range(warm)]
        f = warm
        for b in range(m):
            if f < m:
                row.append(f"{r}F{f}")
                f += 1
            row.append(f"{r}B{b}")
        rows.append(row)
    return rows


def gpipe(p, m, split=False):
    return Schedule.from_rows(gpipe_rows(p, m, split), m)


def onef1b(p, m):
    return Schedule.from_rows(onef1b_rows(p, m), m)
