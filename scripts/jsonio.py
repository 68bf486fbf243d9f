"""Reading what the runs leave behind, for the report scripts (plot_ddp.py, plot_congestion.py,
check_gpu_report.py): a run killed mid-write must not stop a report, so unreadable files and cut
lines are skipped, not raised."""

import json
from pathlib import Path


def load_json(path):
    """One JSON document, or None when the file is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text(errors="replace"))
    except (OSError, ValueError):
        return None


def read_jsonl(path):
    """The JSON objects of a file's lines that start with '{' (log lines and a line cut short by a
    killed process are skipped); [] when the file is missing."""
    out = []
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out
