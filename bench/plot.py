"""The one plotting module: matplotlib without a display, panels in a grid, the project's look."""


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None where matplotlib is missing (reports then skip
    their PNGs and say so)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def panels(plt, n, cols=3, width=5.5, height=4.0, **kw):
    """A figure of N panels in rows of COLS; returns (fig, axes) with axes a flat list of N (the
    grid's unused panels are switched off)."""
    cols = max(1, min(cols, n))
    rows = (n + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, **kw)
    flat = [ax for row in grid for ax in row]
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


def finish(ax, title=None, xlabel=None, ylabel=None, legend_size=8, **kw):
    """Labels, a light grid and a legend when something is labelled."""
    ax.set(**{k: v for k, v in (("title", title), ("xlabel", xlabel), ("ylabel", ylabel)) if v is not None}, **kw)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)


def save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
