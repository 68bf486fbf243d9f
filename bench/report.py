"""Numbers into text: one formatter, ratios that tolerate missing values, aligned and markdown tables."""


def fmt(v, spec=".3f"):
    """'-' for None, yes/NO for booleans, SPEC for numbers, str() for the rest."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, (int, float)):
        try:
            return format(v, spec)
        except ValueError:
            return str(v)
    return str(v)


def ratio(a, b, digits=3):
    """a / b rounded, or None when either is missing or b is 0."""
    return round(a / b, digits) if a is not None and b else None


def table(headers, rows, md=False):
    """Rows of cells (already text) under HEADERS: aligned columns (first left, others right), or a
    markdown table with MD."""
    rows = [[str(c) for c in r] for r in rows]
    if md:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line([str(h) for h in headers])] + [line(r) for r in rows])

