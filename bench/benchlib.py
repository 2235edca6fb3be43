"""Shared by the Python reports of bench/*.sh: the machine line and medians."""
import json
import os
import statistics


def cpu_model():
    """The processor's model name from /proc/cpuinfo ("" if unknown)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine():
    """'N cores, <model>' for a report's Machine line."""
    return f"{os.cpu_count()} cores, {cpu_model()}"


def json_lines(path):
    """The JSON objects of a file's lines that start with '{'."""
    return [json.loads(l) for l in open(path) if l.startswith("{")]


def median(values):
    values = list(values)
    return statistics.median(values) if values else float("nan")


def write_report(path, lines):
    """Writes a report's lines (a Markdown file) and echoes them."""
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    print(text, end="")
