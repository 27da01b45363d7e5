"""The Quality tab's figures (matplotlib, the object API: never pyplot's global state, which every user's
request would share): accuracy per label beside the blind reviewers' agreement, a confusion matrix, items of the
list label, the text's edit ratio, calibration, two prompt versions, and a sample's estimate with the decision's
bounds and targets. Each function takes figures from data.quality and returns a Figure for gr.Plot."""

from __future__ import annotations

from data import quality, taxonomy

GREEN, GREY, BLUE = "#2e7d32", "#9e9e9e", "#1565c0"


def _figure(width: float = 7.0, height: float = 3.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots()


def accuracy_figure(group: quality.Group, agree: quality.Agreement | None):
    """Bars: the model's accuracy per label; a tick over each: how often two reviewers agree, the second blind
    (tables.AGREEMENT_NOTE says how to read one beside the other)."""
    fig, ax = _figure()
    names = list(group.labels)
    acc = [group.labels[n].accuracy or 0.0 for n in names]
    ax.barh(names, acc, color=BLUE, label="model vs approved")
    if agree is not None:
        ceiling = [(i, agree.labels[n].agree) for i, n in enumerate(names) if n in agree.labels and agree.labels[n].n]
        if ceiling:
            ys, xs = zip(*ceiling)
            ax.scatter(xs, ys, marker="|", s=400, color="black", label="two reviewers agree (blind)", zorder=3)
    for i, a in enumerate(acc):
        ax.text(
            min(a, 0.98),
            i,
            f" {a:.2f}",
            va="center",
            ha="right" if a > 0.9 else "left",
            fontsize=8,
            color="white" if a > 0.9 else "black",
        )
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of approved clips the model got right")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    return fig


def matrix_figure(s: quality.LabelStats):
    """The confusion matrix as a heatmap: rows what reviewers approved, columns what the model said, each row
    shaded by its share (a rare class reads as clearly as a common one) and labelled with its count."""
    k = len(s.classes)
    fig, ax = _figure(max(4.5, 0.55 * k + 2.5), max(3.2, 0.45 * k + 1.6))
    shares = [[c / sum(row) if sum(row) else 0.0 for c in row] for row in s.matrix]
    ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    for i, row in enumerate(s.matrix):
        for j, c in enumerate(row):
            if c:
                ax.text(
                    j,
                    i,
                    f"{c:,}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if shares[i][j] > 0.6 else "black",
                )
    ax.set_xticks(range(k), s.classes, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(k), s.classes, fontsize=8)
    ax.set_xlabel("the model said")
    ax.set_ylabel("reviewers approved")
    ax.set_title(f"{s.label}: accuracy {s.accuracy:.3f} on {s.n:,} clips" if s.n else s.label, fontsize=10)
    return fig


def items_figure(s: quality.ItemStats):
    """Per item of the multi-choice label: precision and recall side by side."""
    fig, ax = _figure()
    items = s.items
    xs = range(len(items))
    ax.bar([x - 0.2 for x in xs], [s.precision(i) or 0 for i in items], 0.4, color=BLUE, label="precision")
    ax.bar([x + 0.2 for x in xs], [s.recall(i) or 0 for i in items], 0.4, color=GREEN, label="recall")
    ax.set_xticks(list(xs), items, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_title(f"{s.label}: exact set {s.accuracy or 0:.3f}, mean Jaccard {s.jaccard or 0:.3f}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def edit_ratio_figure(t: quality.TextStats):
    """How much reviewers changed the text: clips per tenth of the word-level edit ratio."""
    fig, ax = _figure(7.0, 2.6)
    bins = quality.HISTOGRAM_BINS
    ax.bar([i / bins for i in range(bins)], t.histogram, width=1 / bins, align="edge", color=GREY, edgecolor="white")
    if t.median is not None:
        ax.axvline(t.median, color="black", linestyle="--", label=f"median {t.median:.3f}")
        ax.legend(fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("word-level edit ratio (0: kept as written, 1: rewritten)")
    ax.set_ylabel("clips")
    return fig


def _counted(label: str) -> str:
    """What one point of a label's calibration is: a clip, or (the list label) a road user the model listed."""
    return "road users listed" if label in taxonomy.MULTI else "clips"


def calibration_figure(label: str, rows: list[dict]):
    """Accuracy against the model's confidence, bucket by bucket (a calibrated model sits on the diagonal), with
    how many values (clips, or road users listed) each bucket holds."""
    fig, ax = _figure(5.5, 4.0)
    ax.plot([0, 1], [0, 1], color=GREY, linestyle="--", label="calibrated")
    full = [r for r in rows if r["n"]]
    ax.plot([r["confidence"] for r in full], [r["accuracy"] for r in full], marker="o", color=BLUE, label="the model")
    for r in full:
        ax.annotate(
            f"{r['n']:,}", (r["confidence"], r["accuracy"]), textcoords="offset points", xytext=(4, -10), fontsize=7
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("the model's confidence in its value")
    ax.set_ylabel("share approved as it said")
    ax.set_title(f"{label}: accuracy by confidence ({_counted(label)} per point)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def compare_figure(cmp: dict):
    """Two prompt versions' accuracy per label, on the same clips."""
    fig, ax = _figure()
    names = list(cmp["labels"])
    xs = range(len(names))
    a = [cmp["labels"][n]["a_accuracy"] or 0 for n in names]
    b = [cmp["labels"][n]["b_accuracy"] or 0 for n in names]
    ax.bar([x - 0.2 for x in xs], a, 0.4, color=GREY, label=version_name(cmp["a"]))
    ax.bar([x + 0.2 for x in xs], b, 0.4, color=BLUE, label=version_name(cmp["b"]))
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(f"on the same {cmp['clips']:,} approved clips", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def estimate_figure(e: quality.Estimate, d: quality.Decision | None = None):
    """Each label's estimated accuracy over the population with its single-look 95 % interval (a dot and bar), the
    bounds the decision uses (valid at every look: a thin grey bar) and the label's target (a red tick)."""
    fig, ax = _figure()
    names = [n for n, le in e.labels.items() if le.interval is not None]
    for i, n in enumerate(names):
        iv = e.labels[n].interval
        x = d.labels.get(n) if d is not None else None
        if x is not None and x.bounds is not None:
            ax.plot([x.bounds.low, x.bounds.high], [i + 0.22, i + 0.22], color=GREY, linewidth=3, solid_capstyle="butt")
        if x is not None and x.target.target is not None:
            ax.plot([x.target.target] * 2, [i - 0.35, i + 0.35], color="#c62828", linewidth=1.5)
        ax.errorbar(iv.p, i, xerr=[[iv.p - iv.low], [iv.high - iv.p]], fmt="o", color=BLUE, capsize=4)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel(
        "accuracy over the batch: 95 % interval, one look (blue); bounds valid at every look (grey); target (red)",
        fontsize=8,
    )
    return fig


def version_name(v: dict) -> str:
    return f"{v['name']} v{v['version']}"
